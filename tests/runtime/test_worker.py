"""The inference workers and the health counters on their own."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.runtime import (
    ConstantVelocityPlanner,
    ErrorKind,
    Health,
    InferenceRequest,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.runtime.health import Count, InvalidInput, percentiles_ms
from blockplan.types import CameraFrame, EgoState, Observation

MS = 1_000_000


def _request(now_ns: int, epoch: int = 0) -> InferenceRequest:
    frame = CameraFrame("front", now_ns, np.zeros((2, 2, 3), np.uint8))
    obs = Observation(now_ns, (frame,), (EgoState(now_ns, 0.0, 0.0, 0.0, 4.0),))
    return InferenceRequest(obs, now_ns, epoch)


class Stopwatch:
    def __init__(self, step_ns: int) -> None:
        self.ns, self.step_ns = 0, step_ns

    def __call__(self) -> int:
        self.ns += self.step_ns
        return self.ns


@pytest.mark.parametrize("timing,ready_after", [("ideal", 0), ("measured", 40 * MS)])
def test_virtual_worker_timing(timing: str, ready_after: int) -> None:
    worker = VirtualWorker(ConstantVelocityPlanner(), timing, stopwatch=Stopwatch(40 * MS))
    worker.submit(_request(1000 * MS))
    assert not worker.is_idle
    with pytest.raises(RuntimeError, match="busy"):
        worker.submit(_request(1000 * MS))
    if ready_after:
        assert worker.poll(1000 * MS + ready_after - 1) == []
    (result,) = worker.poll(1000 * MS + ready_after)
    assert worker.is_idle
    assert result.latency_ns == 40 * MS and result.ready_ns == 1000 * MS + ready_after
    assert result.plan.answer.waypoints[0].tolist() == [4.0, 0.0]


def test_virtual_worker_releases_its_result_when_the_clock_jumps_back() -> None:
    worker = VirtualWorker(ConstantVelocityPlanner(), "measured", stopwatch=Stopwatch(MS))
    worker.submit(_request(5000 * MS))
    assert len(worker.poll(1000 * MS)) == 1 and worker.is_idle


def test_planner_exceptions_become_error_results() -> None:
    class Broken:
        def plan(self, observation: Observation):
            raise ValueError("no ego")

    worker = VirtualWorker(Broken(), "ideal")
    worker.submit(_request(0))
    (result,) = worker.poll(0)
    assert result.plan is None and result.error_kind is ErrorKind.PLANNER
    assert result.error == "ValueError: no ego"
    with pytest.raises(ValueError, match="timing='fast'"):
        VirtualWorker(Broken(), "fast")


def test_health_counts_and_percentiles() -> None:
    health = Health(latency_window=100)
    health.count_invalid("invalid_image")
    health.count_invalid("invalid_image")
    health.count("ticks", 3)
    for ms in range(1, 201):  # only the newest 100 samples (101..200 ms) are kept
        health.record_latency("inference", ms * MS)
    counts = health.counts()
    assert counts["invalid_inputs"] == 2 and counts["invalid_image"] == 2 and counts["ticks"] == 3
    lat = health.latencies_ms()["inference"]
    assert lat["p50"] == pytest.approx(150.5) and lat["max"] == 200.0
    assert percentiles_ms([]) == {"p50": None, "p99": None, "max": None}


def test_drain_accounts_for_a_plan_still_in_flight() -> None:
    from blockplan.config import PlannerConfig
    from blockplan.runtime import PlannerRuntime, VirtualClock

    clock = VirtualClock(10**9)
    stopwatch = Stopwatch(30_000 * MS)  # every planner call "takes" 30 s
    config = PlannerConfig()
    worker = VirtualWorker(
        ConstantVelocityPlanner(), "measured", plan_postprocess(config), stopwatch
    )
    runtime = PlannerRuntime(config, worker, clock, stopwatch=stopwatch)
    for cam in runtime.config.camera_names:
        runtime.on_frame(CameraFrame(cam, 10**9, np.zeros((2, 2, 3), np.uint8)))
    runtime.on_odometry(EgoState(10**9, 0.0, 0.0, 0.0, 4.0))
    assert runtime.tick().is_requested
    assert runtime.drain() == 1
    metrics = runtime.metrics()
    assert metrics["unfinished_plans"] == 1 and metrics["plans"] == 0
    assert metrics["latency_ms"]["p50"] == 30_000.0


def test_health_counters_are_the_enums_members() -> None:
    health = Health()
    health.count(Count.PLANS)
    health.count_invalid(InvalidInput.CORRUPT_MESSAGE)
    health.count_comfort("max_abs_jerk")
    counts = health.counts()
    assert counts["plans"] == 1 and counts["invalid_inputs"] == 1
    assert counts["corrupt_message"] == 1 and counts["comfort_max_abs_jerk"] == 1
    # every counter is there from the start, each under its enum value
    assert {c.value for c in Count} | {k.value for k in InvalidInput} <= set(counts)
    # the inputs status: dropped and rejected inputs, never a plan counter
    inputs = health.input_counts()
    assert inputs["corrupt_message"] == 1 and inputs["invalid_inputs"] == 1
    assert "invalid_plans" not in inputs and "plans" not in inputs
    assert health.comfort_counts() == {"comfort_max_abs_jerk": 1}
    with pytest.raises(ValueError, match="no_such_counter"):
        health.count("no_such_counter")
    with pytest.raises(ValueError, match="bad_kind"):
        health.count_invalid("bad_kind")
