"""Planner end to end on a tiny random model with the real schema and tokenizer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.config import (
    DecodingConfig,
    FrameWindowConfig,
    ModelConfig,
    PlannerConfig,
    RolloutConfig,
)
from blockplan.planner.planner import Planner, PlannerSetupError
from blockplan.schema import SECTION_NAMES
from blockplan.types import NS_PER_S, CameraFrame, EgoState, Observation

CONFIG = PlannerConfig(
    model=ModelConfig(dtype="float64"),
    decoding=DecodingConfig(max_denoise_steps=8),  # full diffusion: keep the test short
    rollouts=RolloutConfig(num_rollouts=3, temperature=0.8, seed=1),
    frame_window=FrameWindowConfig(num_frames=2),
)


def observation(config: PlannerConfig, seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    T = config.frame_window.num_frames
    frames = tuple(
        CameraFrame(name, 10 * NS_PER_S, rng.integers(0, 256, (30, 48, 3), dtype=np.uint8))
        for name in config.camera_names
        for _ in range(T)
    )
    ego = tuple(
        EgoState(stamp_ns=int((7 + 0.5 * i) * NS_PER_S), x=2.5 * i, y=0.0, yaw=0.0, v_x=5.0)
        for i in range(7)
    )
    return Observation(10 * NS_PER_S, frames, ego)


@pytest.fixture(scope="module")
def planner():
    return Planner.random_init("test", CONFIG, seed=0)


@pytest.mark.parametrize(
    "strategy",
    ["ar", "scaffold_spec", "section_diffusion", "full_diffusion", "rollouts", "pipelined"],
)
def test_every_strategy_gives_a_parsed_plan(planner, strategy):
    obs = observation(CONFIG)
    decoded = planner.decode(obs, strategy)
    plan = decoded.plan
    n = 3 if strategy == "rollouts" else 1
    assert plan.rollouts.shape == (n, 5, 2)
    assert plan.stamp_ns == obs.stamp_ns
    assert plan.num_forwards == decoded.result.num_forwards > 0
    assert {"encode", "prompt", "post"} <= set(plan.timings_ms)
    if strategy != "full_diffusion":
        assert {"prefill", *SECTION_NAMES} <= set(plan.timings_ms)
    for row in decoded.result.tokens:
        planner.parse(row)  # strict: raises on any violation


def test_spec_equals_ar_on_the_real_scaffold(planner):
    for seed in range(2):
        obs = observation(CONFIG, seed)
        ar = planner.decode(obs, "ar").result
        spec = planner.decode(obs, "scaffold_spec").result
        assert np.array_equal(ar.tokens, spec.tokens)
        assert spec.num_forwards < ar.num_forwards  # structural runs + drafts save forwards


def test_rollouts_share_the_prefix_and_differ_in_the_trajectory(planner):
    tokens = planner.decode(observation(CONFIG), "rollouts").result.tokens
    start = planner.scaffold.section("trajectory").start
    assert (tokens[:, :start] == tokens[:1, :start]).all()
    assert len({tuple(r) for r in tokens[:, start:].tolist()}) > 1


def test_folder_round_trip(tmp_path, planner):
    planner.model.save_pretrained(tmp_path / "m", tokenizer_json=planner.tokenizer.to_str())
    again = Planner.from_folder(tmp_path / "m", CONFIG)
    obs = observation(CONFIG)
    a = planner.decode(obs, "scaffold_spec").result.tokens
    b = again.decode(obs, "scaffold_spec").result.tokens
    assert np.array_equal(a, b)


def test_mismatches_name_the_field(planner):
    other = dataclasses.replace(CONFIG, frame_window=FrameWindowConfig(num_frames=3))
    with pytest.raises(PlannerSetupError, match="frame_window.num_frames"):
        Planner(planner.model, planner.tokenizer, other)
    obs = observation(CONFIG)
    swapped = Observation(obs.stamp_ns, obs.frames[::-1], obs.ego_history)
    with pytest.raises(PlannerSetupError, match="view-major"):
        planner.plan(swapped)


def test_a_model_refuses_frames_spaced_otherwise_than_it_was_trained(tmp_path, planner):
    """config.json's frame_period_s (written by `blockplan train` from the data set) must be
    the frame window's; folders that do not record it accept any."""
    trained = dataclasses.replace(planner.model.config, frame_period_s=0.5)
    model = type(planner.model)(trained)
    model.save_pretrained(tmp_path / "m", tokenizer_json=planner.tokenizer.to_str())
    assert Planner.from_folder(tmp_path / "m", CONFIG).model.config.frame_period_s == 0.5
    other = dataclasses.replace(CONFIG, frame_window=FrameWindowConfig(frame_period_s=0.4))
    with pytest.raises(PlannerSetupError, match="frame_window.frame_period_s=0.4"):
        Planner.from_folder(tmp_path / "m", other)
    assert Planner(planner.model, planner.tokenizer, other).model.config.frame_period_s is None


def test_warmup_plans_on_synthetic_inputs(planner):
    planner.warmup(1)  # raises if anything in the pipeline does not fit


@pytest.mark.parametrize("strategy", ["scaffold_spec", "rollouts"])
def test_the_previous_answer_is_the_next_plans_first_draft(strategy):
    """The shipped model, one observation planned twice: the second plan drafts from the
    first one's answer (the same tokens, far fewer forwards); switched off, it does not."""
    from blockplan.planner.synthetic import synthetic_observation

    planner = Planner.from_folder("models/blockplan-tiny")
    obs = synthetic_observation(planner.config, 2, schema=planner.schema)
    planner.previous_answer = None
    first = planner.decode(obs, strategy).result
    again = planner.decode(obs, strategy).result
    assert np.array_equal(first.tokens, again.tokens)
    assert again.num_forwards < first.num_forwards
    off = planner.config.with_params({"decoding.draft_from_previous": False})
    cold = planner.sibling(off, planner.runner)
    cold.decode(obs, strategy)
    assert cold.decode(obs, strategy).result.num_forwards == first.num_forwards
    # a stream reset (e.g. after the warm-up) forgets the answer: the next plan is cold,
    # so a live run and its replay draft alike
    planner.reset_stream()
    assert planner.previous_answer is None
    assert planner.decode(obs, strategy).result.num_forwards == first.num_forwards
