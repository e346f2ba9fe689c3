"""Reuse by frame: windows that share any number of frames with earlier ones, at any slots,
stream exactly for frame-only models (logits within 1e-4 in float32, identical plans)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.bench.stream_sequence import window_observation
from blockplan.bench.streaming import prefill_logits, twin_planners
from blockplan.config import ModelConfig, PlannerConfig
from blockplan.planner.planner import Planner
from blockplan.streaming.frame_cache import frame_key, retain
from tests.streaming.streaming_setup import FULL_SIZE, SMALL, _one_thread  # noqa: F401


def random_windows(config: PlannerConfig, ticks: int, seed: int) -> list[list[list[int]]]:
    """Per tick and camera T frame numbers: the newest advances by 0–2 frames, the older ones
    are drawn from the span before it, so windows share 0 … T−1 frames with earlier ones and
    kept frames move by any number of slots (some also return after a tick away)."""
    rng = np.random.default_rng(seed)
    T, K = config.frame_window.num_frames, len(config.camera_names)
    newest = [T + 1] * K
    out = []
    for _ in range(ticks):
        rows = []
        for k in range(K):
            newest[k] += int(rng.integers(0, 3))
            older = rng.choice(np.arange(newest[k] - T - 1, newest[k]), T - 1, replace=False)
            rows.append([*sorted(int(n) for n in older), newest[k]])
        out.append(rows)
    return out


def _parity(config: PlannerConfig, windows, tol: float = 1e-4):
    stream, full = twin_planners(Planner.random_init("test-stream", config, seed=4))
    for i, rows in enumerate(windows):
        obs = window_observation(config, rows)
        a, _ = prefill_logits(stream, obs)
        b, _ = prefill_logits(full, obs)
        assert (a - b).abs().max() <= tol, f"window {i}: {rows}"
    return stream, full


def test_windows_sharing_any_number_of_frames_at_any_slot():
    windows = [
        [[0, 0, 0]],  # start-up: the oldest frame stands in for the missing ones
        [[0, 0, 1]],  # a frame in two slots, kept
        [[0, 1, 2]],
        [[1, 2, 3]],  # slide by one: shares 2
        [[3, 4, 5]],  # shares 1, moved two slots
        [[6, 7, 8]],  # shares 0: a full prefill (disjoint)
        [[7, 8, 9]],
        [[6, 8, 10]],  # frame 6 was not in the last window, but is still held
        [[6, 8, 10], [8, 9, 10]],  # cameras at different shifts
        [[8, 9, 10], [8, 10, 11]],
    ]
    stream, _ = _parity(SMALL, windows)
    stats = stream.streamer.stats
    assert stats.full_prefills == {"first": 1, "disjoint": 1}
    assert stats.streamed == len(windows) - 2
    # Computed: 2 + 2 + 2 (cameras x new frames; duplicates in the first window counted per
    # slot), 2, 4, 6 (disjoint), 2, 2, camera 1: 0, then camera 1 frame 11.
    reused = [0, 4, 4, 4, 2, 0, 4, 4, 6, 5]
    assert stats.frames_reused == sum(reused)
    assert stats.frames_computed == 6 * len(windows) - sum(reused)


def test_frames_held_before_a_disjoint_window_stay_reusable():
    """After a pause in requests (a burst of bad odometry) the frame window still prefers
    frames earlier requests used, so a window may share frames only with the windows before
    a disjoint one: they must still be held, or every window stays disjoint."""
    windows = [
        [[0, 1, 2]],
        [[1, 2, 3]],
        [[4, 5, 6]],  # after the pause: shares nothing, a full prefill
        [[3, 7, 8]],  # shares frame 3 with the window before the pause only
        [[7, 8, 9]],
    ]
    stream, _ = _parity(SMALL, windows)
    stats = stream.streamer.stats
    assert stats.full_prefills == {"first": 1, "disjoint": 1}
    assert stats.streamed == len(windows) - 2  # incremental again right after the pause
    assert stats.frames_reused == 2 * (2 + 0 + 1 + 2)  # 2 cameras


def test_held_frames_are_bounded_and_old_ones_forgotten():
    stream, _ = _parity(SMALL, [[[n, n + 1, n + 2]] for n in range(12)])
    T, K = 3, 2
    assert stream.streamer.num_stored_frames <= K * (T + 1)  # the window + one period more
    assert len(stream.vision_cache) <= K * (T + 1)


def test_retain_keeps_the_window_and_recent_frames_per_camera():
    keys = [("a", s, 0) for s in range(10)] + [("b", s, 0) for s in range(4)]
    store = dict.fromkeys(keys, 1)
    window = [("a", 5, 0), ("a", 9, 0), ("b", 2, 0), ("b", 3, 0)]
    kept = retain(store, window, span_ns=2, capacity=3)  # a: 5 in the window, 6 too many
    assert set(kept) == {
        ("a", 9, 0),
        ("a", 8, 0),
        ("a", 5, 0),
        ("b", 3, 0),
        ("b", 2, 0),
        ("b", 1, 0),
    }
    assert set(retain(store, [("c", 1, 0)], 100, 3)) == set()


def test_random_windows_stream_exactly_and_plans_match():
    windows = random_windows(SMALL, 12, seed=1)
    stream, full = _parity(SMALL, windows)
    stats = stream.streamer.stats
    assert stats.streamed >= 8 and stats.frames_reused > stats.frames_computed / 2
    stream.reset_stream()
    for rows in windows[:6]:
        obs = window_observation(SMALL, rows)
        a, b = stream.decode(obs), full.decode(obs)
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)


def test_reuse_is_exact_in_float64():
    config = dataclasses.replace(SMALL, model=ModelConfig(dtype="float64"))
    _parity(config, random_windows(config, 6, seed=2), tol=1e-10)


def test_degraded_black_frames_never_alias_real_ones():
    obs = window_observation(SMALL, [[0, 1, 2]])
    black = dataclasses.replace(obs.frames[0], image=np.zeros_like(obs.frames[0].image))
    assert frame_key(black) != frame_key(obs.frames[0])
    assert frame_key(black)[:2] == frame_key(obs.frames[0])[:2]


@pytest.mark.slow
def test_50_tick_replay_of_random_windows_4_cameras_4_frames():
    windows = random_windows(FULL_SIZE, 50, seed=3)
    stream, full = _parity(FULL_SIZE, windows)
    stream.reset_stream()
    for rows in windows:
        obs = window_observation(FULL_SIZE, rows)
        a, b = stream.decode(obs), full.decode(obs)
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)
        np.testing.assert_array_equal(a.plan.rollouts, b.plan.rollouts)
    assert stream.streamer.stats.streamed >= 80  # of 100 ticks
