"""The control loop on a virtual clock with the constant-velocity planner."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from blockplan.config import FrameWindowConfig, LaneGuardConfig, PlannerConfig
from blockplan.runtime import (
    ConstantVelocityPlanner,
    PlannerRuntime,
    SystemClock,
    ThreadWorker,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.types import CameraFrame, EgoState, Observation, Plan

MS = 1_000_000
SPEED = 5.0


class Drive:
    """A car driving straight at SPEED, cameras and odometry at 10 Hz, one tick per sample."""

    def __init__(self, runtime: PlannerRuntime, clock: VirtualClock, start_ns: int = 10**9):
        self.runtime, self.clock, self.t = runtime, clock, start_ns
        self.x = 0.0
        self.cameras = list(runtime.config.camera_names)

    def step(self, cameras: list[str] | None = None, odometry: bool = True):
        self.t += 100 * MS
        self.x += SPEED * 0.1
        self.clock.set(self.t)
        for cam in self.cameras if cameras is None else cameras:
            self.runtime.on_frame(CameraFrame(cam, self.t, np.zeros((4, 4, 3), np.uint8)))
        if odometry:
            self.runtime.on_odometry(EgoState(self.t, self.x, 0.0, 0.0, SPEED))
        return self.runtime.tick()

    def run(self, n: int, **kw):
        return [self.step(**kw) for _ in range(n)]


def _runtime(
    timing: str = "ideal", planner=None, policy: str = "degrade", lane_guard=False, **control
):
    config = PlannerConfig(
        frame_window=FrameWindowConfig(stale_camera_policy=policy),
        control=dataclasses.replace(PlannerConfig().control, **control),
        lane_guard=lane_guard
        if isinstance(lane_guard, LaneGuardConfig)
        else LaneGuardConfig(enabled=lane_guard),
    )
    clock = VirtualClock(10**9)
    runtime = PlannerRuntime(
        config,
        VirtualWorker(planner or ConstantVelocityPlanner(), timing, plan_postprocess(config)),
        clock,
    )
    return runtime, Drive(runtime, clock)


def test_ideal_timing_publishes_a_fresh_plan_every_tick() -> None:
    runtime, drive = _runtime("ideal")
    outputs = drive.run(20)
    assert all(not o.is_fallback for o in outputs)
    assert all(len(o.new_plans) == 1 for o in outputs)
    last = outputs[-1]
    assert last.trajectory.stamp_ns == drive.t
    np.testing.assert_allclose(last.trajectory.x, SPEED * last.trajectory.t, atol=1e-9)
    np.testing.assert_allclose(last.trajectory.y, 0.0, atol=1e-9)
    metrics = runtime.metrics()
    assert metrics["ticks"] == 20 and metrics["plans"] == 20 and metrics["fallbacks"] == 0
    assert metrics["plan_age_ms"]["p50"] == 0.0
    assert metrics["latency_ms"]["p50"] > 0


def test_measured_timing_delays_plans_by_their_latency() -> None:
    class Stopwatch:
        """A test stopwatch: time passes only inside the planner."""

        ns = 0

        def __call__(self) -> int:
            return self.ns

    stopwatch = Stopwatch()

    class SlowPlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            stopwatch.ns += 250 * MS  # each call costs 250 ms of compute
            return super().plan(observation)

    config = PlannerConfig()
    clock = VirtualClock(10**9)
    runtime = PlannerRuntime(
        config,
        VirtualWorker(SlowPlanner(), "measured", plan_postprocess(config), stopwatch),
        clock,
        stopwatch=stopwatch,
    )
    drive = Drive(runtime, clock)
    outputs = drive.run(12)
    # The first plan is requested at tick 0 and ready 250 ms later: ticks 0-2 fall back.
    assert [o.is_fallback for o in outputs[:4]] == [True, True, True, False]
    # One worker: a new request only every 3 ticks, so about a third of the ticks get a plan.
    assert runtime.metrics()["requests"] == 4
    assert runtime.metrics()["inference_overruns"] == runtime.metrics()["plans"]
    ages = [o.now_ns - o.source.stamp_ns for o in outputs[3:]]
    assert min(ages) == 300 * MS and max(ages) == 500 * MS
    assert runtime.metrics()["latency_ms"]["p50"] == 250.0
    assert runtime.metrics()["deadline_misses"] == 0  # inference runs off the tick
    # The published trajectory is stitched to now: still x = v·t in the current ego frame.
    np.testing.assert_allclose(outputs[-1].trajectory.x, SPEED * outputs[-1].trajectory.t)


@pytest.mark.parametrize("policy", ["wait", "degrade", "fallback"])
def test_stale_camera_policies(policy: str) -> None:
    runtime, drive = _runtime("ideal", policy=policy, max_plan_age_s=0.5)
    drive.run(5)
    live = drive.cameras[:-1]
    outputs = drive.run(10, cameras=live)  # the rear camera goes silent
    silent = outputs[4:]  # after max_frame_age (0.3 s) the camera is stale
    metrics = runtime.metrics()
    if policy == "degrade":
        assert all(not o.is_fallback for o in silent)
        assert all(p.is_degraded for o in silent for p in o.new_plans)
        assert metrics["degraded_requests"] >= len(silent)
    elif policy == "wait":
        assert all(not o.new_plans for o in silent)
        assert metrics["waits"] >= len(silent)
        # the last plan is published until it is older than max_plan_age_s, then the fallback
        assert not silent[0].is_fallback and silent[-1].is_fallback
    else:
        assert all(o.is_fallback and "policy fallback" in o.reason for o in silent)
    assert runtime.diagnostics()[-2].name == "blockplan: odometry"
    camera_status = {s.name: s for s in runtime.diagnostics()}
    assert camera_status["blockplan: camera rear"].level == 1  # WARN: stale
    recovered = drive.run(3)
    assert not recovered[-1].is_fallback


def test_no_odometry_means_fallback_stop() -> None:
    runtime, drive = _runtime("ideal")
    outputs = drive.run(3, odometry=False)
    assert all(o.is_fallback for o in outputs)
    assert "stop" in outputs[-1].reason
    np.testing.assert_allclose(outputs[-1].trajectory.speed, 0.0)
    diag = {s.name: s for s in runtime.diagnostics()}
    assert diag["blockplan: odometry"].level == 2


def test_planner_errors_are_counted_and_answered_with_the_fallback() -> None:
    class FlakyPlanner(ConstantVelocityPlanner):
        def __init__(self) -> None:
            self.calls = 0

        def plan(self, observation: Observation) -> Plan:
            self.calls += 1
            if self.calls > 3:
                raise RuntimeError("CUDA out of memory")
            return super().plan(observation)

    runtime, drive = _runtime("ideal", planner=FlakyPlanner(), max_plan_age_s=0.25)
    outputs = drive.run(10)
    metrics = runtime.metrics()
    assert metrics["planner_errors"] == 7 and metrics["plans"] == 3
    assert not outputs[4].is_fallback  # the last good plan is still young enough
    assert outputs[-1].is_fallback and "hold_last" in outputs[-1].reason  # held, then…
    status = runtime.diagnostics()[0]
    assert status.level == 2 and "CUDA out of memory" in status.message


def test_plans_failing_the_gates_are_rejected() -> None:
    class SwervePlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            plan = super().plan(observation)
            wild = plan.answer.waypoints * np.array([1.0, 0.0]) + np.array([0.0, 30.0])
            answer = dataclasses.replace(plan.answer, waypoints=wild)
            return dataclasses.replace(plan, answer=answer, rollouts=wild[None])

    runtime, drive = _runtime("ideal", planner=SwervePlanner())
    outputs = drive.run(4)
    assert all(o.is_fallback for o in outputs)
    assert runtime.metrics()["invalid_plans"] == 4
    assert "fails the gates" in runtime.last_problem["plan"]


def test_uncomfortable_plans_are_published_and_reported() -> None:
    """Accelerating at 3.5 m/s² is beyond the comfort limit (2.4) but feasible (hard gate 6):
    the plan is published, counted, and named on /diagnostics."""

    class EagerPlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            plan = super().plan(observation)
            t = np.arange(1, 6, dtype=np.float64)
            eager = np.stack([SPEED * t + 0.5 * 3.5 * t**2, 0 * t], -1)  # (5, 2)
            answer = dataclasses.replace(plan.answer, waypoints=eager)
            return dataclasses.replace(plan, answer=answer, rollouts=eager[None])

    runtime, drive = _runtime("ideal", planner=EagerPlanner())
    outputs = drive.run(4)
    assert not any(o.is_fallback for o in outputs)  # published: comfort never rejects
    metrics = runtime.metrics()
    assert metrics["invalid_plans"] == 0
    assert metrics["uncomfortable_plans"] == metrics["plans"] == metrics["comfort_max_accel"] == 4
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: comfort"]
    assert status.level == 1 and "max_accel" in status.message
    assert status.values["uncomfortable_plans"] == 4
    assert status.values["newest_max_accel"] == pytest.approx(3.5, abs=1e-3)


def test_time_jump_resets_and_recovers() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(10)
    drive.t -= 30 * 10**9  # the bag loops
    outputs = drive.run(6)
    metrics = runtime.metrics()
    assert metrics["time_jumps"] == 1
    assert "time jump" in outputs[0].events[0]
    assert not outputs[-1].is_fallback
    assert outputs[-1].trajectory.stamp_ns == drive.t


def test_the_diagnostics_after_a_time_jump_say_so_once() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(10)
    assert {s.name: s for s in runtime.diagnostics()}["blockplan: control loop"].level == 0
    drive.t -= 30 * 10**9
    drive.run(3)
    loop = {s.name: s for s in runtime.diagnostics()}["blockplan: control loop"]
    assert loop.level == 1 and loop.message.startswith("time jump, runtime reset: ")
    assert "jumped back" in loop.message and loop.values["time_jumps"] == 1
    drive.run(3)
    loop = {s.name: s for s in runtime.diagnostics()}["blockplan: control loop"]
    assert loop.level == 0 and loop.message == "publishing plans"  # said once


def test_inputs_name_what_was_rejected_since_the_last_snapshot() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(3)
    runtime.on_odometry(EgoState(drive.t + 1, float("nan"), 0.0, 0.0, SPEED))
    runtime.on_lead(drive.t, float("nan"), 10.0)
    runtime.on_lead(drive.t, -1.0, 10.0)
    inputs = {s.name: s for s in runtime.diagnostics()}["blockplan: inputs"]
    assert inputs.level == 1
    assert inputs.message.startswith("lead_invalid x2: car ahead at ")
    assert "; odometry_nonfinite x1: odometry at " in inputs.message
    runtime.on_lead(drive.t, -2.0, 10.0)
    inputs = {s.name: s for s in runtime.diagnostics()}["blockplan: inputs"]
    assert inputs.level == 1 and "odometry_nonfinite" not in inputs.message  # not since
    assert {s.name: s for s in runtime.diagnostics()}["blockplan: inputs"].level == 0


def test_a_route_command_the_model_does_not_know_is_rejected_and_the_last_one_kept() -> None:
    from blockplan.schema.spec import DrivingSchema

    planner = ConstantVelocityPlanner()
    planner.schema = DrivingSchema()  # what an engine planner carries (its prompt's commands)
    runtime, drive = _runtime("ideal", planner=planner)
    runtime.on_route_command("turn_left")
    runtime.on_route_command("\u2603 garbage")
    assert runtime.route_command == "turn_left"
    assert runtime.metrics()["unknown_route_command"] == 1
    assert not drive.run(3)[-1].is_fallback
    # A planner without a schema (a baseline) takes any command, as before.
    runtime, _ = _runtime("ideal")
    runtime.on_route_command("anything")
    assert runtime.route_command == "anything"


def test_the_planner_forgets_the_old_timeline_before_its_first_plan_of_the_new_one() -> None:
    """After a time jump the planner's carry-over (streamed frames, the previous answer it
    drafts from) is forgotten on the worker, before the new epoch's first plan: live and
    replay then plan the new timeline alike (docs/RUNTIME.md "Live and offline")."""
    events: list[str] = []

    class RecordingPlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            events.append("plan")
            return super().plan(observation)

        def reset_stream(self) -> None:
            events.append("forget")

    runtime, drive = _runtime("ideal", planner=RecordingPlanner())
    drive.run(3)
    assert events == ["plan"] * 3
    drive.t -= 30 * 10**9  # the bag loops
    drive.run(2)
    assert events == ["plan"] * 3 + ["forget", "plan", "plan"]


def test_clock_jump_back_without_inputs_resets() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(5)
    drive.clock.set(drive.t - 20 * 10**9)
    out = runtime.tick()
    assert out.is_fallback and runtime.metrics()["time_jumps"] == 1


def test_late_timer_counts_a_deadline_miss() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(3)
    drive.t += 500 * MS  # the timer fired 0.5 s late
    drive.step()
    assert runtime.metrics()["deadline_misses"] == 1


def test_invalid_inputs_are_counted_and_reported() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(2)
    runtime.on_odometry(EgoState(drive.t + 1, float("nan"), 0.0, 0.0, 5.0))
    runtime.on_invalid_input("invalid_image", "front: corrupt jpeg")
    runtime.on_frame(CameraFrame("nope", drive.t, np.zeros((2, 2, 3), np.uint8)))
    assert runtime.metrics()["invalid_inputs"] == 3
    inputs = runtime.diagnostics()[-1]
    assert inputs.level == 1 and "corrupt jpeg" in inputs.message
    assert inputs.values["odometry_nonfinite"] == 1
    assert runtime.diagnostics()[-1].level == 0  # nothing new since the last snapshot
    with pytest.raises(ValueError, match="not_a_kind"):
        runtime.on_invalid_input("not_a_kind", "an adapter's typo is a programming error")


def test_thread_worker_live_mode() -> None:
    started = threading.Event()
    release = threading.Event()

    class BlockingPlanner(ConstantVelocityPlanner):
        def plan(self, observation: Observation) -> Plan:
            started.set()
            assert release.wait(10)
            return super().plan(observation)

    config = PlannerConfig()
    clock = SystemClock()
    runtime = PlannerRuntime(
        config, ThreadWorker(BlockingPlanner(), clock, plan_postprocess(config)), clock
    )
    try:
        now = SystemClock().now_ns()
        for cam in config.camera_names:
            runtime.on_frame(CameraFrame(cam, now, np.zeros((4, 4, 3), np.uint8)))
        runtime.on_odometry(EgoState(now, 0.0, 0.0, 0.0, 3.0))
        first = runtime.tick()
        assert first.is_requested and first.is_fallback  # inference runs off the tick
        assert started.wait(10)
        assert not runtime.tick().is_requested  # the worker is busy
        release.set()
        assert runtime.worker.wait_idle(10)
        out = runtime.tick()
        assert len(out.new_plans) == 1 and not out.is_fallback
    finally:
        release.set()
        runtime.close()


class InputsPlanner(ConstantVelocityPlanner):
    """A planner whose model reads the optional inputs asked for (the lane pose, the car
    ahead, the lanes beside, the route ahead); keeps every observation it was asked to plan."""

    def __init__(
        self,
        *,
        lane_pose: bool = False,
        lead: bool = False,
        beside: bool = False,
        route: bool = False,
    ):
        self.reads_lane_pose, self.reads_lead, self.reads_beside = lane_pose, lead, beside
        self.reads_route = route
        self.seen: list[Observation] = []

    def plan(self, observation: Observation) -> Plan:
        self.seen.append(observation)
        return super().plan(observation)

    @property
    def poses(self) -> list[tuple[float, float] | None]:
        return [o.lane_pose for o in self.seen]

    @property
    def leads(self) -> list[tuple[float, float] | None]:
        return [o.lead for o in self.seen]


def test_the_lane_pose_goes_to_a_planner_that_reads_it_while_it_is_fresh() -> None:
    planner = InputsPlanner(lane_pose=True)
    runtime, drive = _runtime("ideal", planner=planner)
    drive.step()  # t = 1.1 s: no lane pose yet
    runtime.on_lane_pose(drive.t + 100 * MS, 0.3, 0.02)  # stamped 1.2 s
    drive.step()  # 1.2 s: that pose
    runtime.on_lane_pose(drive.t + 150 * MS, 9.0, 9.0)  # stamped 1.35 s
    drive.step()  # 1.3 s: never a pose from after the window's stamp
    drive.run(3)  # 1.4-1.6 s: the newer pose, up to max_lane_pose_age_s = 0.25 s old
    drive.step()  # 1.7 s: 0.35 s old, too old
    assert planner.poses == [None, (0.3, 0.02), (0.3, 0.02)] + [(9.0, 9.0)] * 3 + [None]
    assert runtime.metrics()["requests_without_lane_pose"] == 2
    runtime.on_lane_pose(drive.t, float("nan"), 0.0)  # rejected and counted
    assert runtime.metrics()["lane_pose_nonfinite"] == 1
    drive.step()
    assert planner.poses[-1] is None


def test_a_planner_that_does_not_read_the_lane_pose_is_not_given_it() -> None:
    planner = InputsPlanner()
    runtime, drive = _runtime("ideal", planner=planner)
    runtime.on_lane_pose(drive.t + 100 * MS, 0.3, 0.02)
    drive.step()
    assert planner.seen[-1].lane_pose is None
    assert runtime.metrics()["requests_without_lane_pose"] == 0


def test_the_car_ahead_goes_to_a_planner_that_reads_it_while_it_is_fresh() -> None:
    """The tracker's report is used like the lane pose (newest not after the window, at most
    max_lead_age_s old); "no car ahead" (an infinite gap) is a report, a NaN or non-positive
    gap or a car without a speed is rejected and counted; a time jump forgets them."""
    planner = InputsPlanner(lead=True)
    runtime, drive = _runtime("ideal", planner=planner)
    drive.step()  # t = 1.1 s: no report yet
    runtime.on_lead(drive.t + 100 * MS, 32.0, 18.5)  # stamped 1.2 s
    drive.step()  # 1.2 s
    runtime.on_lead(drive.t + 150 * MS, float("inf"), float("nan"))  # 1.35 s: none ahead
    runtime.on_lead(drive.t + 120 * MS, 5.0, 5.0)  # late (older than the newest): dropped
    drive.step()  # 1.3 s: never a report from after the window's stamp
    drive.run(3)  # 1.4-1.6 s: the newer report, up to 0.25 s old
    drive.step()  # 1.7 s: too old
    none_ahead = planner.leads[3]
    assert planner.leads[:3] == [None, (32.0, 18.5), (32.0, 18.5)]
    assert none_ahead[0] == float("inf") and np.isnan(none_ahead[1])
    assert planner.leads[-1] is None and len(planner.leads) == 7
    assert runtime.metrics()["requests_without_lead"] == 2
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: lead vehicle"]
    assert status.level == 1 and "planning without it" in status.message  # WARN: too old
    assert status.values["requests_without_lead"] == 2
    runtime.on_lead(drive.t, 12.0, 3.0)
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: lead vehicle"]
    assert status.level == 0 and status.values["gap_m"] == 12.0
    for gap, speed in ((float("nan"), 1.0), (0.0, 1.0), (-3.0, 1.0), (20.0, float("nan"))):
        runtime.on_lead(drive.t, gap, speed)
    assert runtime.metrics()["lead_invalid"] == 4
    assert runtime.metrics()["requests_without_lane_pose"] == 0  # it does not read that


def test_a_planner_that_does_not_read_the_car_ahead_is_not_given_it() -> None:
    planner = InputsPlanner(lane_pose=True)
    runtime, drive = _runtime("ideal", planner=planner)
    runtime.on_lead(drive.t + 100 * MS, 30.0, 10.0)
    drive.step()
    assert runtime.metrics()["requests_without_lead"] == 0
    assert runtime.lead_at(drive.t) == (30.0, 10.0)  # kept, just not handed over
    names = {s.name for s in runtime.diagnostics()}
    assert "blockplan: lane pose" in names and "blockplan: lead vehicle" not in names


def test_the_lanes_beside_go_to_a_planner_that_reads_them_while_fresh() -> None:
    """The map's and the tracker's report of the lanes beside is used like the car ahead
    (newest not after the window, at most max_beside_age_s old); NaN marks what is unknown
    (a side's lane count, or its cars) and an infinite gap no car, whose speed is not kept;
    a report with another shape, a negative or fractional lane count, a negative gap or a car
    without a speed is rejected and counted; diagnostics name every value."""
    inf, nan = float("inf"), float("nan")
    planner = InputsPlanner(lead=True, beside=True)
    runtime, drive = _runtime("ideal", planner=planner)
    report = np.array([[1.0, 12.0, 20.0, inf, 3.0], [nan, nan, nan, nan, nan]])
    drive.step()  # t = 1.1 s: no report yet
    runtime.on_beside(drive.t + 100 * MS, report)  # stamped 1.2 s
    drive.step()  # 1.2 s
    drive.run(2)  # 1.3-1.4 s: up to 0.25 s old
    drive.step()  # 1.5 s: 0.3 s old, too old
    seen = [o.beside for o in planner.seen]
    assert seen[0] is None and seen[-1] is None and len(seen) == 5
    for got in seen[1:4]:
        np.testing.assert_array_equal(got, [[1.0, 12.0, 20.0, inf, nan], [nan] * 5])
    assert runtime.metrics()["requests_without_beside"] == 2
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: lanes beside"]
    assert status.level == 1 and "planning without it" in status.message
    runtime.on_beside(drive.t, report)
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: lanes beside"]
    assert status.level == 0
    assert status.values["left_lanes"] == 1.0 and status.values["left_gap_ahead_m"] == 12.0
    assert np.isnan(status.values["right_lanes"])
    bad = [
        np.zeros((2, 4)),  # another shape
        np.array([[-1.0, inf, 0, inf, 0], [1.0, inf, 0, inf, 0]]),  # a negative lane count
        np.array([[1.5, inf, 0, inf, 0], [1.0, inf, 0, inf, 0]]),  # a fractional one
        np.array([[1.0, -2.0, 5, inf, 0], [1.0, inf, 0, inf, 0]]),  # a negative gap
        np.array([[1.0, 8.0, nan, inf, 0], [1.0, inf, 0, inf, 0]]),  # a car without a speed
    ]
    for value in bad:
        runtime.on_beside(drive.t, value)
    assert runtime.metrics()["beside_invalid"] == len(bad)
    assert runtime.metrics()["requests_without_lead"] == 5  # it reads that too, never sent


def test_a_planner_that_does_not_read_the_lanes_beside_gets_them_only_for_the_lane_guard():
    """A model that does not read the lanes beside is not counted or reported without them;
    the observation carries them while the lane guard (on by default) checks its plans."""
    report = np.array([[1.0, np.inf, np.nan, np.inf, np.nan]] * 2)
    for enabled in (True, False):
        planner = InputsPlanner(lead=True)
        runtime, drive = _runtime("ideal", planner=planner, lane_guard=enabled)
        runtime.on_beside(drive.t + 100 * MS, report)
        drive.step()
        assert (planner.seen[-1].beside is not None) == enabled
        assert runtime.metrics()["requests_without_beside"] == 0
        assert "blockplan: lanes beside" not in {s.name for s in runtime.diagnostics()}


def test_the_route_goes_to_a_planner_that_reads_it_as_points_ahead_of_the_ego() -> None:
    """The router's path (odom) is read at each request from the ego's pose then: the points
    `ROUTE_AHEAD_M` along it in the ego frame, so the same path gives nearer points as the
    ego drives on; it stays good for max_route_age_s, a path the ego is far from is not
    read, a malformed one is rejected and counted; diagnostics report its age and size."""
    from blockplan.types import ROUTE_AHEAD_M

    planner = InputsPlanner(route=True)
    runtime, drive = _runtime("ideal", planner=planner)
    xs = np.arange(-20.0, 200.0, 2.0)
    path = np.stack([xs, np.full_like(xs, 1.0)], axis=-1)  # a lane centre 1 m to the left
    drive.step()  # t = 1.1 s: no route yet
    runtime.on_route(drive.t + 100 * MS, path)  # stamped 1.2 s
    drive.run(10)  # 1.2-2.1 s: at most 0.9 s old
    drive.step()  # 2.2 s: 1.0 s old, still good
    drive.step()  # 2.3 s: too old
    seen = [o.route_ahead for o in planner.seen]
    assert seen[0] is None and seen[-1] is None and len(seen) == 13
    for got in seen[1:-1]:
        np.testing.assert_allclose(got, [(d, 1.0) for d in ROUTE_AHEAD_M], atol=1e-9)
    assert runtime.metrics()["requests_without_route"] == 2
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: route"]
    assert status.level == 1 and "planning without it" in status.message
    runtime.on_route(drive.t, path + [0.0, 50.0])  # a path 50 m to the side: not the ego's
    drive.step()
    assert planner.seen[-1].route_ahead is None
    status = {s.name: s for s in runtime.diagnostics()}["blockplan: route"]
    assert status.level == 0 and status.values["points"] == len(path)
    bad = [np.zeros((1, 2)), np.zeros((5, 3)), np.array([[0.0, 0.0], [np.nan, 1.0]])]
    for value in bad:
        runtime.on_route(drive.t, value)
    assert runtime.metrics()["route_invalid"] == len(bad)


def test_any_route_message_is_taken_or_refused_never_raised():
    """Random paths (any length, repeated points, NaN, inf, huge or tiny coordinates, wrong
    shapes): the runtime keeps or refuses each without raising, and what reaches the planner
    is six finite points or nothing."""
    planner = InputsPlanner(route=True)
    runtime, drive = _runtime("ideal", planner=planner)
    rng = np.random.default_rng(7)
    for k in range(200):
        n = int(rng.integers(0, 12))
        path = rng.normal(scale=10.0 ** rng.integers(-3, 13), size=(n, 2))
        if k % 5 == 0 and n:
            path[rng.integers(n)] = rng.choice([np.nan, np.inf, -np.inf])
        if k % 7 == 0:
            path = np.repeat(path[:1], 4, axis=0) if n else path
        if k % 11 == 0:
            path = rng.normal(size=(n, 3))
        runtime.on_route(drive.t, path)
        drive.step()
    assert 0 < runtime.metrics()["route_invalid"] < 200
    for route in (o.route_ahead for o in planner.seen):
        assert route is None or (len(route) == 6 and np.isfinite(route).all())


def test_a_planner_that_does_not_read_the_route_never_gets_it():
    planner = InputsPlanner(lead=True)
    runtime, drive = _runtime("ideal", planner=planner)
    runtime.on_route(drive.t + 100 * MS, np.array([[0.0, 0.0], [100.0, 0.0]]))
    drive.step()
    assert planner.seen[-1].route_ahead is None
    assert runtime.metrics()["requests_without_route"] == 0
    assert "blockplan: route" not in {s.name for s in runtime.diagnostics()}


class SwervingPlanner(ConstantVelocityPlanner):
    """Four rollouts: three keep the lane, one changes to the left within 5 s."""

    def plan(self, observation: Observation) -> Plan:
        plan = super().plan(observation)
        rollouts = np.repeat(plan.answer.waypoints[None], 4, axis=0)
        rollouts[2, :, 1] += np.array([0.2, 0.8, 1.8, 3.0, 3.8])
        return dataclasses.replace(plan, rollouts=rollouts)


def test_the_lane_guard_drops_a_rollout_into_a_car_beside_in_the_loop() -> None:
    # at the test's 5 m/s a lane change turns more than a highway's: the turn limit is raised
    guard = LaneGuardConfig(enabled=True, max_turn_rad=0.5)
    runtime, drive = _runtime("ideal", planner=SwervingPlanner(), lane_guard=guard)
    drive.run(12)  # over a second of straight driving: the guard checks only a straight road
    assert runtime.metrics()["guarded_rollouts"] == 0  # no report yet: nothing checked
    alongside = np.array([[1.0, 1.5, SPEED, np.inf, np.nan], [0.0, np.inf, np.nan, np.inf, np.nan]])
    runtime.on_beside(drive.t + 100 * MS, alongside)
    out = drive.step()
    assert not out.is_fallback and runtime.metrics()["guarded_rollouts"] == 1
    assert abs(out.trajectory.y).max() < 1e-6  # the three that keep the lane
    runtime.on_beside(drive.t + 100 * MS, np.array([[1.0, np.inf, 0, np.inf, 0]] * 2))
    out = drive.step()  # the lane is free: all four are averaged
    assert runtime.metrics()["guarded_rollouts"] == 1 and out.trajectory.y.max() > 0.5
