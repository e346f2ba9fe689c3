"""Training the flow head: the K/V it reads in training are the serving cache's, the loss is
the text sections' SASD plus rectified flow, a token folder starts a flow run, the CLI."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from blockplan.config import config_from_params
from blockplan.decoding.strategies import rollout_section
from blockplan.model.flow_head import KVRecorder
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from blockplan.train.objective import FLOW_SAMPLES, SASDModule, draw_flow_noise, draw_noise
from blockplan.train.recipe import Recipe
from blockplan.train.trainer import TrainConfig, Trainer, TrainError
from tests.flow.conftest import flow_planner
from tests.train.conftest import CAMERAS, NUM_FRAMES, write_dataset


def module_of(planner: Planner) -> SASDModule:
    recipe = Recipe(planner.model.config, planner.schema, planner.tokenizer)
    return SASDModule(planner.model, recipe)


@torch.no_grad()
def test_training_reads_the_kv_the_serving_cache_holds():
    planner = flow_planner(num_rollouts=1)
    module = module_of(planner)
    obs = synthetic_observation(planner.config, 0)
    answer = torch.from_numpy(planner.decode(obs).result.tokens)  # (1, A), the cache's text
    prompt = torch.tensor(np.asarray(planner.render(obs).token_ids))[None]
    images = torch.from_numpy(np.stack([f.image for f in obs.frames]))[None]
    noisy, _ = draw_noise(module.layout, answer.numpy(), module.mask_id, np.random.default_rng(0))
    recorder = KVRecorder(module.read_layers)
    module.hidden_states(prompt, answer, images, torch.from_numpy(noisy), recorder)
    keys, values = recorder.prefix(module.prefix_len)
    served_keys, served_values = planner.flow.prefix(planner.cache)
    assert (
        module.prefix_len
        == planner.cache.length
        == planner.prompt_len + rollout_section(planner.scaffold).start
    )
    torch.testing.assert_close(keys, served_keys, rtol=0, atol=2e-4)
    torch.testing.assert_close(values, served_values, rtol=0, atol=2e-4)


def test_loss_is_text_sasd_plus_flow_and_flow_trains_the_decoder():
    planner = flow_planner(num_rollouts=1)
    module = module_of(planner).train()
    trajectory = rollout_section(planner.scaffold)
    assert float(module.weight[trajectory.start : trajectory.end].abs().sum()) == 0.0
    assert float(module.weight[: trajectory.start].sum()) > 0
    rng = np.random.default_rng(0)
    B = 2
    obs = synthetic_observation(planner.config, 0)
    prompt = torch.tensor(np.asarray(planner.render(obs).token_ids))[None].repeat(B, 1)
    answer = torch.tensor(np.asarray(planner.scaffold.token_ids))[None].repeat(B, 1)
    images = torch.from_numpy(np.stack([f.image for f in obs.frames]))[None].repeat(B, 1, 1, 1, 1)
    noisy, masks = draw_noise(module.layout, answer.numpy(), module.mask_id, rng)
    x0, tau = draw_flow_noise(B, rng)
    assert x0.shape == (FLOW_SAMPLES * B, 5, 2)
    future = torch.cumsum(torch.full((B, 20, 2), 0.25), dim=1)
    out = module(
        prompt,
        answer,
        images,
        torch.from_numpy(noisy),
        torch.from_numpy(masks),
        future_xy=future,
        flow_noise=torch.from_numpy(x0),
        flow_tau=torch.from_numpy(tau),
    )
    sasd = 0.5 * out["diffusion"] + 0.5 * out["ar"]
    torch.testing.assert_close(out["loss"].detach(), sasd + out["flow"])
    module.zero_grad()
    # the flow loss alone reaches the decoder through the prefix K/V (joint training)
    keys = KVRecorder(module.read_layers)
    module.hidden_states(prompt, answer, images, torch.from_numpy(noisy), keys)
    k, v = keys.prefix(module.prefix_len)
    loss = module.flow_loss(future[:, 3::4], k, v, torch.from_numpy(x0), torch.from_numpy(tau))
    loss.backward()
    grad = planner.model.decoder.model.layers[0].self_attn.k_proj.weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="future_xy"):
        module(prompt, answer, images, torch.from_numpy(noisy), torch.from_numpy(masks))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("flowdata"), {"train": [0, 1], "val": [3]})


def test_flow_run_starts_from_a_token_folder_and_resumes_exactly(data, tmp_path):
    from blockplan.train.examples import load_examples

    tokens = Recipe.build("test", CAMERAS, NUM_FRAMES)
    train = load_examples(data, "train", tokens)
    token_run = Trainer(tokens, train, tmp_path / "tok", TrainConfig(steps=1, batch_size=2))
    token_run.fit()
    flow = Recipe.build("test", CAMERAS, NUM_FRAMES, trajectory_head="flow")
    flow = flow.with_flow_statistics(train.future_xy)
    mean = np.asarray(flow.model_config.flow_head.waypoint_mean).reshape(5, 2)
    np.testing.assert_allclose(mean, train.future_xy[:, 3::4].mean(axis=0), atol=1e-3)
    config = TrainConfig(steps=2, batch_size=2, save_every=1)
    run = Trainer(flow, train, tmp_path / "flow", config, progress=False)
    run.init_from(tmp_path / "tok" / "best")
    source = token_run.model.state_dict()
    for name, tensor in run.model.state_dict().items():
        if not name.startswith("flow_head."):
            assert torch.equal(tensor, source[name]), name
    run.fit(until=1)
    again = Trainer(flow, train, tmp_path / "flow", config, progress=False)
    assert again.resume() and again.step == 1
    done = again.fit()
    straight = Trainer(flow, train, tmp_path / "flow2", config, progress=False)
    straight.init_from(tmp_path / "tok" / "best")
    assert straight.fit()["param_digests"] == done["param_digests"]
    # a flow folder does not start a token run
    back = Trainer(tokens, train, tmp_path / "tok2", TrainConfig(steps=1, batch_size=2))
    with pytest.raises(TrainError, match="architecture"):
        back.init_from(tmp_path / "flow" / "best")


@pytest.mark.slow
def test_cli_trains_a_flow_folder_that_plans(data, tmp_path, monkeypatch):
    from blockplan import cli

    out = tmp_path / "run"
    argv = [
        "blockplan",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        "--arch",
        "test",
        "--cameras",
        *CAMERAS,
        "--trajectory-head",
        "flow",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--save-every",
        "1",
        "--num-threads",
        "1",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    assert cli.main() == 0
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["trajectory_head"] == "flow"
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("flow" in r and "val/flow" not in r for r in log if r["event"] == "train")
    assert any("val/flow" in r for r in log if r["event"] == "checkpoint")
    config = config_from_params({"cameras": {"names": list(CAMERAS)}})
    planner = Planner.from_folder(out / "best", config)
    plan = planner.plan(synthetic_observation(planner.config, 0))
    assert plan.rollouts.shape == (1, 5, 2) and np.isfinite(plan.rollouts).all()
