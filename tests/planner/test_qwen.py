"""The engine on a Qwen2.5-VL checkpoint: a folder written by transformers, loaded with
`Planner.from_folder`, decoded with every cached strategy and parsed strictly."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.model.masks import block_causal_mask
from blockplan.model.qwen2_5_vl.planner_model import QwenPlannerModel
from blockplan.planner.planner import Planner, PlannerSetupError
from blockplan.planner.qwen import fastddrive_config
from blockplan.planner.synthetic import synthetic_observation
from blockplan.schema.qwen_tokens import build_qwen_like_tokenizer
from tests.optional import importorskip

transformers = importorskip("transformers")

IMAGE_SIZE = (56, 84)  # 2 x 3 = 6 visual tokens per image


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Qwen2.5-VL saved by transformers + a Qwen-like tokenizer.json."""
    from tests.model.qwen_fixtures import hf_config

    folder = tmp_path_factory.mktemp("fastddrive")
    tokenizer = build_qwen_like_tokenizer(folder / "tokenizer.json")
    config = hf_config(transformers, vocab_size=tokenizer.vocab_size + 4)
    config.image_token_id = tokenizer.token_id("<|image_pad|>")
    config.vision_start_token_id = tokenizer.token_id("<|vision_start|>")
    config.vision_end_token_id = tokenizer.token_id("<|vision_end|>")
    config.video_token_id = tokenizer.token_id("<|video_pad|>")
    torch.manual_seed(0)
    hf = transformers.Qwen2_5_VLForConditionalGeneration(config).eval()
    hf.save_pretrained(folder)
    settings = {"image_size": list(IMAGE_SIZE), "schema": {"explanation_budget": 40}}
    (folder / "blockplan.json").write_text(json.dumps(settings))
    return folder, hf


@pytest.fixture(scope="module")
def planner(folder):
    return Planner.from_folder(folder[0])


def test_from_folder_seats_the_checkpoint(planner):
    assert isinstance(planner.model, QwenPlannerModel)
    assert planner.model.config.camera_names == ("front_left", "front", "front_right")
    assert planner.model.config.tokens_per_image == 6
    assert planner.schema.mask_token == "|<MASK>|"
    assert planner.schema.explanation_budget == 40
    assert planner.streamer is None and planner.vision_cache is None
    # mRoPE: the answer continues after the largest prompt position, not at P
    assert planner.positions.prompt.shape == (3, planner.prompt_len)
    assert planner.positions.answer_start < planner.prompt_len


def test_prompt_logits_match_transformers(folder, planner):
    _, hf = folder
    obs = synthetic_observation(planner.config, seed=3)
    embeds, layout = planner.embed(obs, {})
    ids = torch.tensor(np.asarray(layout.token_ids))[None]
    frames = [torch.from_numpy(f.image.copy())[None] for f in obs.frames]
    pixels = torch.cat([planner.model.visual.preprocess(f)[0] for f in frames])
    grid = torch.tensor([[1, IMAGE_SIZE[0] // 14, IMAGE_SIZE[1] // 14]] * len(frames))
    with torch.no_grad():
        expected = hf(
            input_ids=ids,
            pixel_values=pixels,
            image_grid_thw=grid,
            mm_token_type_ids=(ids == hf.config.image_token_id).int(),
        ).logits
        got = planner.model(
            inputs_embeds=embeds,
            positions=planner.positions.for_prompt(),
            mask=planner.prompt_mask,
        )
    assert (got - expected).abs().max().item() <= 1e-4


def test_scaffold_spec_equals_ar_and_ar_equals_a_full_recompute(planner):
    obs = synthetic_observation(planner.config, seed=1)
    ar = planner.decode(obs, "ar")
    spec = planner.decode(obs, "scaffold_spec")
    assert np.array_equal(ar.result.tokens, spec.result.tokens)
    assert spec.result.num_forwards < ar.result.num_forwards
    # Reference: one causal forward over prompt + answer (no cache) with the mRoPE
    # positions; every editable slot holds the constrained argmax of its predecessor.
    embeds, _ = planner.embed(obs, {})
    tokens = torch.from_numpy(ar.result.tokens[0])  # (A,)
    A, P = len(tokens), planner.prompt_len
    x = torch.cat([embeds, planner.model.embed(tokens[None])], dim=1)
    mask = block_causal_mask(planner.prompt_mask, [(a, a + 1) for a in range(A)])
    with torch.no_grad():
        logits = planner.model(
            inputs_embeds=x, positions=planner.positions.with_answer(A), mask=mask
        )[0, P - 1 : P + A - 1]  # (A, V): slot a predicted at P - 1 + a
    for a in np.flatnonzero(planner.scaffold.is_editable):
        allowed = planner.constraints.allowed(int(a), tokens.numpy())
        row = logits[a].double().numpy()
        if allowed is not None:
            row = np.where(allowed[: len(row)], row, -np.inf)
        row[planner.scaffold.mask_id] = -np.inf
        assert int(row.argmax()) == int(tokens[a]), a


def test_rollouts_fork_and_parse(planner):
    config = dataclasses.replace(
        planner.config, rollouts=dataclasses.replace(planner.config.rollouts, num_rollouts=3)
    )
    four = Planner(planner.model, planner.tokenizer, config, planner.schema)
    plan = four.decode(synthetic_observation(config, seed=2), "rollouts").plan
    assert plan.rollouts.shape == (3, 5, 2)


def test_other_backends_are_refused(folder, planner):
    config = planner.config
    config = dataclasses.replace(
        config, model=dataclasses.replace(config.model, backend="onnxruntime")
    )
    with pytest.raises(PlannerSetupError, match="torch backend only"):
        Planner(planner.model, planner.tokenizer, config, planner.schema)


def test_random_init_test_preset_plans():
    planner = Planner.random_init("qwen2.5-vl-test", fastddrive_config())
    plan = planner.plan(synthetic_observation(planner.config, seed=0))
    assert plan.rollouts.shape[1:] == (5, 2)


def test_bench_on_the_folder_reports_unverified_weights(folder, tmp_path):
    from blockplan.cli import main

    out = tmp_path / "bench.json"
    args = ["bench", "--model", str(folder[0]), "--strategies", "scaffold_spec"]
    args += ["--iters", "1", "--warmup", "0", "--threads", "1", "--json", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["model"]["weights"] == "unverified"
    assert report["model"]["cameras"] == 3
    assert report["strategies"]["scaffold_spec"]["valid_fraction"] == 1.0


@pytest.mark.parametrize("strategy", ["section_diffusion", "full_diffusion"])
def test_diffusion_strategies_decode_and_parse(planner, strategy):
    decoded = planner.decode(synthetic_observation(planner.config, seed=5), strategy)
    assert decoded.result.tokens.shape == (1, len(planner.scaffold))
    assert decoded.plan.rollouts.shape == (1, 5, 2)


def test_block_size_from_bd_size_and_unknown_settings(tmp_path):
    from blockplan.model.config import ModelConfigError
    from blockplan.planner.qwen import read_settings

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "bd_size": 16}))
    assert read_settings(tmp_path) == {"block_size": 16}
    (tmp_path / "blockplan.json").write_text(json.dumps({"block_size": 8}))
    assert read_settings(tmp_path) == {"block_size": 8}
    (tmp_path / "blockplan.json").write_text(json.dumps({"cameras": 3}))
    with pytest.raises(ModelConfigError, match="cameras"):
        read_settings(tmp_path)
