"""Pipelined block decoding (docs/ALGORITHMS.md §8) and the robot planner it was built for."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from blockplan.config import MODEL_STRATEGIES, ModelConfig, PlannerConfig
from blockplan.decoding.block_loop import AnswerState, DecodeContext
from blockplan.decoding.decode import DecodeOptions, decode
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.pipelined import PipelineOptions
from blockplan.decoding.strategies import commit_confident
from blockplan.model.masks import block_causal_mask, causal_mask
from blockplan.planner.embodiment import robot_config
from blockplan.planner.planner import Planner, PlannerSetupError
from blockplan.planner.synthetic import synthetic_robot_observation
from blockplan.types import ActionPlan
from tests.decoding.robot_setup import CONFIG, SCHEMA, robot_planner, with_pipeline

SERIAL = dict(add_threshold=1.0, activate_threshold=1.0)


@pytest.fixture(scope="module")
def planner() -> Planner:
    return robot_planner(0)


@pytest.mark.parametrize(("seed", "block_size"), [(0, 3), (1, 3), (2, 6)])
def test_add_threshold_one_is_serial_block_diffusion(seed, block_size):
    serial = robot_planner(seed, with_pipeline(CONFIG, **SERIAL), block_size=block_size)
    obs = synthetic_robot_observation(serial.config, seed, serial.schema)
    section = serial.decode(obs, "section_diffusion").result
    pipelined = serial.decode(obs, "pipelined").result
    assert np.array_equal(pipelined.tokens, section.tokens)
    # a finished block's K/V ride in its successor's first forward: one forward fewer per block
    assert pipelined.num_forwards == section.num_forwards - len(serial.scaffold.blocks)
    assert set(pipelined.active_blocks) == {1}


def test_add_threshold_one_is_serial_on_the_driving_schema_too():
    config = PlannerConfig(model=ModelConfig(dtype="float64"))
    driving = Planner.random_init("test", with_pipeline(config, **SERIAL), seed=3)
    from blockplan.planner.synthetic import synthetic_observation

    obs = synthetic_observation(driving.config, 3, schema=driving.schema)
    section = driving.decode(obs, "section_diffusion")
    pipelined = driving.decode(obs, "pipelined")
    assert np.array_equal(pipelined.result.tokens, section.result.tokens)
    assert pipelined.plan.rollouts.shape == (1, 5, 2)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_serial_on_hand_built_scaffolds_with_either_cache_attention(
    decoder_factory, scaffold_factory, seed
):
    model, scaffold = decoder_factory(seed), scaffold_factory(seed, 5)
    ids = torch.randint(3, 16, (1, 7), generator=torch.Generator().manual_seed(seed))
    embeds, mask = model.embed(ids).detach(), causal_mask(7)
    for attention in ("causal", "block"):
        section = decode(
            model,
            embeds,
            mask,
            scaffold,
            DecodeOptions("section_diffusion", confidence_threshold=0.5),
            cache_attention=attention,
        )
        options = DecodeOptions("pipelined", pipeline=PipelineOptions(0.5, 1.0, 1.0))
        pipelined = decode(model, embeds, mask, scaffold, options, cache_attention=attention)
        assert np.array_equal(pipelined.tokens, section.tokens)


def _committed_and_recomputed(model, embeds, prompt_mask, scaffold, result, answer_mask):
    """(committed K/V, the same slots of a full recompute of prompt + decoded answer)."""
    P, A = embeds.shape[1], len(scaffold)
    tokens = torch.as_tensor(result.tokens)
    full = torch.cat([embeds, model.embed(tokens)], dim=1)
    mask = block_causal_mask(prompt_mask, answer_mask)
    reference = KVCache.for_model(model.decoder_config, P + A, 1, embeds.dtype)
    model(inputs_embeds=full, positions=torch.arange(P + A), mask=mask, cache=reference)
    return reference


@pytest.mark.parametrize("seed", [0, 1])
def test_committed_kv_equal_a_full_recompute_of_the_finished_prefix(seed):
    # thresholds that finish the first block while later ones are still open, so its K/V
    # are written (with every block in flight from the start, the random-init model can
    # finish them all at once, and then nothing is committed: nothing would read it)
    planner = robot_planner(seed, with_pipeline(CONFIG, add_threshold=0.3, activate_threshold=0.7))
    obs = synthetic_robot_observation(planner.config, seed, planner.schema)
    embeds, _ = planner.embed(obs, {})
    P, A = embeds.shape[1], len(planner.scaffold)
    cache = KVCache.for_model(planner.model.decoder_config, P + A, 1, torch.float64)
    options = DecodeOptions.from_config(planner.config, "pipelined")
    result = decode(
        planner.runner,
        embeds,
        planner.prompt_mask,
        planner.scaffold,
        options,
        cache=cache,
        constraints=planner.constraints,
        cache_attention="block",
    )
    blocks = planner.scaffold.blocks
    committed = cache.length - P
    assert committed in [b.start for b in blocks[1:]]  # whole blocks, at least the first
    spans = [(b.start, b.end) for b in blocks]  # robot models: bidirectional inside a block
    reference = _committed_and_recomputed(
        planner.model, embeds, planner.prompt_mask, planner.scaffold, result, spans
    )
    L = cache.length
    assert torch.allclose(cache.kv[..., :L, :], reference.kv[..., :L, :], atol=1e-10)
    assert torch.allclose(cache.raw_keys[..., :L, :], reference.raw_keys[..., :L, :], atol=1e-10)


def test_committed_kv_are_token_causal_for_vehicle_models(decoder_factory, scaffold_factory):
    model, scaffold = decoder_factory(5), scaffold_factory(5, 4)
    ids = torch.randint(3, 16, (1, 7), generator=torch.Generator().manual_seed(5))
    embeds, prompt = model.embed(ids).detach(), causal_mask(7)
    P, A = 7, len(scaffold)
    cache = KVCache.for_model(model.decoder_config, P + A, 1, torch.float64)
    options = DecodeOptions("pipelined", pipeline=PipelineOptions(0.5, 0.2, 0.5))
    result = decode(model, embeds, prompt, scaffold, options, cache=cache)
    assert max(result.active_blocks) > 1 and cache.length > P
    token_causal = [(a, a + 1) for a in range(A)]
    reference = _committed_and_recomputed(model, embeds, prompt, scaffold, result, token_causal)
    L = cache.length
    assert torch.allclose(cache.kv[..., :L, :], reference.kv[..., :L, :], atol=1e-10)


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_fills_every_slot_and_parses_to_bin_centres(planner, strategy):
    config = dataclasses.replace(
        planner.config, rollouts=dataclasses.replace(planner.config.rollouts, num_rollouts=2)
    )
    robot = Planner(planner.model, planner.tokenizer, config, planner.schema, planner.runner)
    obs = synthetic_robot_observation(robot.config, 7, robot.schema)
    decoded = robot.decode(obs, strategy)
    plan = decoded.plan
    assert isinstance(plan, ActionPlan) and plan.stamp_ns == obs.stamp_ns
    n = 2 if strategy == "rollouts" else 1
    H, D = SCHEMA.horizon, SCHEMA.action_dim
    assert plan.actions.shape == (H, D) and plan.rollouts.shape == (n, H, D)
    assert not (decoded.result.tokens == robot.scaffold.mask_id).any()
    low, high = np.array(SCHEMA.action_low), np.array(SCHEMA.action_high)
    width = (high - low) / SCHEMA.num_bins
    assert np.allclose(
        (plan.rollouts - low) / width - 0.5, np.round((plan.rollouts - low) / width - 0.5)
    )
    assert np.array_equal(plan.bins, np.round((plan.actions - low) / width - 0.5))
    assert {"encode", "prompt", "post"} <= set(plan.timings_ms)


def test_default_thresholds_overlap_blocks_in_one_forward(planner):
    obs = synthetic_robot_observation(planner.config, 3, planner.schema)
    section = planner.decode(obs, "section_diffusion").result
    pipelined = planner.decode(obs, "pipelined").result
    assert max(pipelined.active_blocks) > 1
    assert pipelined.num_forwards < section.num_forwards
    assert len(pipelined.active_blocks) == pipelined.num_forwards - 1  # and the prefill


def _state_with_unknowns(n: int) -> tuple[DecodeContext, AnswerState]:
    from blockplan.schema.layout import Block, Scaffold, Section

    scaffold = Scaffold(
        token_ids=np.array([9] + [1] * n),
        is_editable=np.array([False] + [True] * n),
        sections=(Section("actions", 0, n + 1, n),),
        blocks=(Block(0, n + 1, "actions"),),
        block_size=n,
        mask_id=1,
        null_id=2,
    )
    state = AnswerState.start(scaffold, torch.zeros(1, 8))
    ctx = DecodeContext(model=None, cache=None, scaffold=scaffold, prompt_len=0)  # type: ignore[arg-type]
    return ctx, state


def test_commit_rules_threshold_and_minimum():
    confidences = [0.95, 0.6, 0.3, 0.45, 0.55]
    logits = torch.full((1, 5, 8), -30.0, dtype=torch.float64)
    for i, c in enumerate(confidences):  # token i + 3 has probability c, the rest share 1 - c
        logits[0, i] = torch.log(torch.tensor((1 - c) / 7, dtype=torch.float64))
        logits[0, i, i + 3] = torch.log(torch.tensor(c, dtype=torch.float64))
    expected = {
        (0.5, 0): [True, True, False, False, True],  # semi-activated: above the threshold only
        (0.9, 1): [True, False, False, False, False],  # head: section diffusion's rule
        (0.99, 1): [True, False, False, False, False],  # at least the most confident
        (0.99, 0): [False] * 5,
        (0.9, 3): [True, True, False, False, True],  # fully activated: the top 3 at least
        (0.5, 9): [True] * 5,
    }
    for (threshold, minimum), known in expected.items():
        ctx, state = _state_with_unknowns(5)
        commit_confident(ctx, state, 1, logits, threshold, minimum)
        assert state.is_known[0, 1:].tolist() == known, (threshold, minimum)
        chosen = state.tokens[0, 1:][state.is_known[0, 1:]]
        assert chosen.tolist() == [i + 3 for i, k in enumerate(known) if k]


def test_planner_refuses_an_embodiment_mismatch(planner):
    vehicle = dataclasses.replace(
        CONFIG, model=dataclasses.replace(CONFIG.model, embodiment="vehicle")
    )
    with pytest.raises(PlannerSetupError, match="model.embodiment='vehicle': the model is a robot"):
        Planner(planner.model, planner.tokenizer, vehicle)
    with pytest.raises(PlannerSetupError, match="model.embodiment='robot'"):
        Planner.random_init("test", robot_config(PlannerConfig()))


def test_robot_preset_and_folder_round_trip(tmp_path):
    config = robot_config(PlannerConfig(model=ModelConfig(dtype="float64")))
    planner = Planner.random_init("robot-test", config, seed=1)
    assert planner.model.config.embodiment == "robot" and planner.cache_attention == "block"
    assert planner.model.config.block_size == planner.schema.action_dim == 7
    folder = planner.model.save_pretrained(tmp_path / "m", planner.tokenizer.to_str())
    again = Planner.from_folder(folder, config)
    assert again.schema == planner.schema
    obs = synthetic_robot_observation(config, 1, planner.schema)
    first = planner.decode(obs, "pipelined").result.tokens
    assert np.array_equal(again.decode(obs, "pipelined").result.tokens, first)
    planner.warmup()
