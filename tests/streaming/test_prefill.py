"""Streaming frame window: exact for frame-only models, counted full prefills, opt-in drift."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.bench.stream_sequence import stream_observation
from blockplan.bench.streaming import (
    prefill_logits,
    run_streaming_bench,
    twin_planners,
    with_streaming,
)
from blockplan.config import ModelConfig, PlannerConfig
from blockplan.planner.planner import Planner
from tests.streaming.streaming_setup import FULL_SIZE, SMALL, _one_thread  # noqa: F401


def _twins(preset: str, config: PlannerConfig) -> tuple[Planner, Planner]:
    return twin_planners(Planner.random_init(preset, config, seed=4))


def _check_stream(config: PlannerConfig, ticks: int, planned: set[int], strategy=None) -> None:
    stream, full = _twins("test-stream", config)
    for tick in range(ticks):
        obs = stream_observation(config, tick)
        a, _ = prefill_logits(stream, obs)
        b, _ = prefill_logits(full, obs)
        assert (a - b).abs().max() <= 1e-4, f"tick {tick}"
    stream.reset_stream()
    for tick in range(ticks):
        obs = stream_observation(config, tick)
        # Plan every tick on the streamed side (its window must slide); compare some.
        a = stream.decode(obs, strategy)
        if tick in planned:
            b = full.decode(obs, strategy)
            np.testing.assert_array_equal(a.result.tokens, b.result.tokens)
            np.testing.assert_array_equal(a.plan.rollouts, b.plan.rollouts)
    stats = stream.streamer.stats  # two passes over the stream, a reset between them
    assert stats.full_prefills == {"first": 1, "reset": 1} and stats.streamed == 2 * (ticks - 1)
    K, T = len(config.camera_names), config.frame_window.num_frames
    assert stats.frames_computed == 2 * (K * T + K * (ticks - 1))
    assert stats.frames_reused == 2 * K * (T - 1) * (ticks - 1)


def test_exact_model_streams_losslessly_small():
    _check_stream(SMALL, ticks=8, planned={0, 1, 7})


@pytest.mark.slow
def test_exact_model_streams_losslessly_over_50_ticks_4_cameras_4_frames():
    _check_stream(FULL_SIZE, ticks=50, planned=set(range(50)))


def test_streaming_rollouts_share_the_streamed_prefix():
    _check_stream(SMALL, ticks=2, planned={1}, strategy="rollouts")


def test_only_new_frames_are_encoded_and_auto_streams_exact_models_only():
    stream = Planner.random_init("test-stream", SMALL)
    assert stream.streamer is not None  # "auto" + an exact model
    for tick in range(4):
        stream.plan(stream_observation(SMALL, tick))
    K, T = 2, 3
    assert stream.vision_cache.frames_encoded == K * T + 3 * K
    approx = Planner.random_init("test", SMALL)
    assert approx.streamer is None and approx.vision_cache is not None  # lossless part only
    off = Planner.random_init("test-stream", with_streaming(SMALL, "off"))
    assert off.streamer is None and off.vision_cache is None


def test_gaps_time_jumps_and_disjoint_windows_are_full_prefills():
    stream, full = _twins("test-stream", SMALL)
    sequence = [0, 1, 5, 6, 2, 3, 3, 4]  # a gap (1→5), a jump back (6→2), a repeat (3→3)
    for tick in sequence:
        obs = stream_observation(SMALL, tick)
        a, _ = prefill_logits(stream, obs)
        b, _ = prefill_logits(full, obs)
        assert (a - b).abs().max() <= 1e-4
    stats = stream.streamer.stats
    assert stats.full_prefills == {"first": 1, "gap": 1, "time_jump": 1}
    assert stats.streamed == 5  # 0→1, 5→6, 2→3, 3→3 (same window), 3→4
    # Camera 1's frames replaced (same stamps, other pixels): camera 0's are still reused.
    obs = stream_observation(SMALL, 5)
    inverted = (dataclasses.replace(f, image=255 - f.image) for f in obs.frames[3:])
    changed = dataclasses.replace(obs, frames=(*obs.frames[:3], *inverted))
    before = stats.frames_reused
    a, _ = prefill_logits(stream, changed)
    b, _ = prefill_logits(full, changed)
    assert (a - b).abs().max() <= 1e-4 and stats.streamed == 6
    assert stats.frames_reused - before == 2  # frames 5 and 6 of camera 0
    # Every frame replaced: nothing to reuse.
    dimmed = tuple(dataclasses.replace(f, image=f.image // 2) for f in obs.frames)
    prefill_logits(stream, dataclasses.replace(obs, frames=dimmed))
    assert stats.full_prefills["disjoint"] == 1
    stream.reset_stream()
    prefill_logits(stream, stream_observation(SMALL, 6))
    assert stats.full_prefills["reset"] == 1


def test_default_layout_streams_only_when_asked_and_drifts():
    planner = Planner.random_init("test", with_streaming(SMALL, "on"), seed=4)
    assert planner.streamer is not None and not planner.model.config.streams_exactly
    report = run_streaming_bench(planner, ticks=4, plans=1)["streaming"]
    assert report["exact"] is False and report["prefill"]["streamed_ticks"] == 3
    # Moved frames carry their old slot embedding and header distance: approximate.
    assert report["max_abs_logit_diff"] > 1e-4
    assert report["ade_diff_m"]["mean"] >= 0.0


def test_bench_report_of_an_exact_model():
    planner = Planner.random_init("test-stream", SMALL, seed=4)
    report = run_streaming_bench(planner, ticks=3, plans=1)["streaming"]
    assert report["exact"] and report["max_abs_logit_diff"] <= 1e-4
    assert report["ticks"] == 3 and report["plans_identical"] == 1
    assert report["ade_diff_m"]["max"] == 0.0
    assert report["prefill_cost_ratio"] > 0
    assert report["prefill_token_ratio"] < 1
    with pytest.raises(ValueError, match="ticks"):
        run_streaming_bench(planner, ticks=1, plans=0)


def test_exact_in_float64_up_to_rounding():
    """In float64 the streamed and recomputed logits agree to rounding: the float32 residual
    (RoPE angles of different absolute positions) is not an approximation of the method."""
    config = dataclasses.replace(SMALL, model=ModelConfig(dtype="float64"))
    stream, full = _twins("test-stream", config)
    for tick in range(4):
        obs = stream_observation(config, tick)
        a, _ = prefill_logits(stream, obs)
        b, _ = prefill_logits(full, obs)
        assert (a - b).abs().max() <= 1e-10
    assert stream.streamer.stats.streamed == 3


def test_streaming_on_where_it_cannot_stream_is_an_error():
    """`streaming: on` with a backend that cannot stream fails the setup, naming why; `auto`
    there streams nothing, and `streaming_stats()["mode"]` says "off", the mode in effect."""
    from blockplan.backends import StepBackend, TorchGraphExecutor
    from blockplan.planner.planner import PlannerSetupError

    reference = Planner.random_init("test-stream", with_streaming(SMALL, "auto"), seed=4)
    assert reference.streaming_stats()["mode"] == "auto" and reference.streamer is not None
    executor = TorchGraphExecutor(reference.model, (4, 16, 64, 256), reference.cache.max_len)
    graph = StepBackend("torch-graph", reference.model, executor)
    parts = (reference.model, reference.tokenizer)
    with pytest.raises(PlannerSetupError, match="streaming='on'.*torch-graph backend cannot"):
        Planner(*parts, with_streaming(SMALL, "on"), reference.schema, backend=graph)
    auto = Planner(*parts, with_streaming(SMALL, "auto"), reference.schema, backend=graph)
    assert auto.streamer is None and auto.vision_cache is None
    assert auto.streaming_stats()["mode"] == "off"


def test_streaming_on_with_a_model_that_cannot_stream_is_an_error():
    from blockplan.planner.planner import PlannerSetupError
    from blockplan.planner.qwen import fastddrive_config

    config = with_streaming(fastddrive_config(), "on")
    with pytest.raises(PlannerSetupError, match="QwenPlannerModel cannot stream"):
        Planner.random_init("qwen2.5-vl-test", config)
    planner = Planner.random_init("qwen2.5-vl-test", fastddrive_config())
    assert planner.streaming_stats()["mode"] == "off"
