"""`frame_window.reuse_tolerance`: consecutive requests share frames; 0 changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockplan.config import ConfigError, FrameWindowConfig, PlannerConfig, config_from_params
from blockplan.ros.params import parameter_specs
from blockplan.runtime import (
    ConstantVelocityPlanner,
    FrameWindow,
    PlannerRuntime,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.types import CameraFrame, Observation, Plan
from tests.runtime.test_loop import Drive

MS = 1_000_000


def _frame(camera: str, stamp_ns: int) -> CameraFrame:
    return CameraFrame(camera, stamp_ns, np.zeros((2, 3, 3), np.uint8))


def _run(tolerance: float, request_every_ms: int, requests: int = 20):
    """A 10 Hz camera, T = 4 at 0.5 s; a request every `request_every_ms`: per request the
    snapshot's stamps, and the (shared, new) frames `mark_used` counted."""
    config = FrameWindowConfig(num_frames=4, frame_period_s=0.5, reuse_tolerance=tolerance)
    window = FrameWindow(("c",), config)
    out = []
    for i in range(requests * request_every_ms // 100 + 40):
        window.push(_frame("c", i * 100 * MS))
        now = i * 100 * MS
        if now >= 2000 * MS and (now - 2000 * MS) % (request_every_ms * MS) == 0:
            snap = window.snapshot(now)
            stamps = tuple(f.stamp_ns for f in snap.frames[0])
            out.append((stamps, window.mark_used(snap.complete_frames()), snap))
    return out


def test_requests_off_the_frame_period_share_frames_only_with_a_tolerance() -> None:
    plain = _run(0.0, 400)
    tolerant = _run(0.2, 400)  # 0.1 s
    shared = [sum(s for _, (s, _), _ in run[1:]) for run in (plain, tolerant)]
    assert shared[0] == 0  # 0.4 s apart: every frame of the window is new
    assert shared[1] >= 2 * (len(tolerant) - 1)  # at least 2 of 4 frames reused per request
    # The spacing error the tolerance introduces is bounded by it.
    period = 500 * MS
    assert all(snap.spacing_error_ns(period) <= 100 * MS for *_, snap in tolerant)
    assert all(snap.spacing_error_ns(period) == 0 for *_, snap in plain)


def test_a_request_every_frame_period_shares_three_frames_either_way() -> None:
    for tolerance in (0.0, 0.4):
        run = _run(tolerance, 500)
        assert all(shared == 3 and new == 1 for _, (shared, new), _ in run[1:])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 170), min_size=8, max_size=40),
    st.lists(st.integers(0, 6), min_size=3, max_size=10),
)
def test_zero_tolerance_never_changes_the_choice(gaps_ms, request_every) -> None:
    """With reuse_tolerance = 0 the window is the plain nearest-frame window, whatever
    earlier requests used."""
    config = FrameWindowConfig(num_frames=3, frame_period_s=0.2, reuse_tolerance=0.0)
    marking, plain = FrameWindow(("c",), config), FrameWindow(("c",), config)
    stamp, j = 0, 0
    for i, gap in enumerate(gaps_ms):
        stamp += gap * MS
        for w in (marking, plain):
            w.push(_frame("c", stamp))
        if i % (request_every[j % len(request_every)] + 1) == 0:
            j += 1
            a, b = marking.snapshot(stamp), plain.snapshot(stamp)
            assert [f.stamp_ns for f in a.frames[0]] == [f.stamp_ns for f in b.frames[0]]
            marking.mark_used(a.complete_frames())


def test_tolerance_is_validated_and_a_ros_parameter() -> None:
    assert FrameWindowConfig(reuse_tolerance=0.4).reuse_tolerance == 0.4
    assert FrameWindowConfig(frame_period_s=0.1).reuse_tolerance == 0.25  # any period
    for bad in (-0.1, 0.5, float("nan")):
        with pytest.raises(ConfigError, match="frame_window.reuse_tolerance"):
            FrameWindowConfig(reuse_tolerance=bad)
    specs = {s.name: s for s in parameter_specs(PlannerConfig())}
    spec = specs["frame_window.reuse_tolerance"]
    assert spec.type == "double" and spec.default == 0.25 and not spec.read_only
    assert specs["frame_window.streaming"].choices == ("auto", "on", "off")
    params = {"frame_window": {"reuse_tolerance": 0.1}}
    assert config_from_params(params).frame_window.reuse_tolerance == 0.1


def test_used_stamps_are_forgotten_with_the_buffer_and_on_clear() -> None:
    config = FrameWindowConfig(num_frames=2, frame_period_s=0.5, reuse_tolerance=0.2)
    window = FrameWindow(("c",), config)
    for i in range(5):
        window.push(_frame("c", i * 100 * MS))
    assert window.mark_used(window.snapshot(400 * MS).complete_frames()) == (0, 2)
    assert window.mark_used(window.snapshot(400 * MS).complete_frames()) == (2, 0)
    for i in range(5, 40):
        window.push(_frame("c", i * 100 * MS))
    assert window.mark_used(window.snapshot(3900 * MS).complete_frames()) == (0, 2)
    window.clear()
    window.push(_frame("c", 3900 * MS))
    assert window.mark_used(window.snapshot(3900 * MS).complete_frames()) == (0, 2)


@pytest.mark.parametrize("tolerance", [0.0, 0.2, 0.4])
def test_loop_with_a_300_ms_worker_shares_frames_only_with_a_tolerance(tolerance) -> None:
    """10 Hz loop and cameras, a plan costs 300 ms: a request every 3 ticks (0.3 s, the tick
    that collects a plan submits the next), off the 0.5 s frame period. Measured in the
    loop's own counters."""

    class Stopwatch:
        ns = 0

        def __call__(self) -> int:
            return self.ns

    stopwatch = Stopwatch()

    class SlowPlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            stopwatch.ns += 300 * MS
            return super().plan(observation)

    fw = FrameWindowConfig(num_frames=4, frame_period_s=0.5, reuse_tolerance=tolerance)
    config = PlannerConfig(frame_window=fw)
    clock = VirtualClock(10**9)
    runtime = PlannerRuntime(
        config,
        VirtualWorker(SlowPlanner(), "measured", plan_postprocess(config), stopwatch),
        clock,
        stopwatch=stopwatch,
    )
    Drive(runtime, clock).run(100)
    m = runtime.metrics()
    shared, new = m["window_frames_shared"], m["window_frames_new"]
    assert shared + new == 16 * m["requests"] and m["requests"] >= 24
    spacing = m["frame_spacing_error_ms"]
    fraction = shared / (shared + new)
    assert spacing["max"] <= tolerance * 500  # ms
    if tolerance == 0.0:
        # Only a window five requests (1.5 s) later meets an earlier newest frame again.
        assert fraction <= 0.3
    else:
        assert fraction >= 0.5
