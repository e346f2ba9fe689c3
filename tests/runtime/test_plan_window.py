"""Which window each plan used (`PlanWindow`), rejected plans in the tick output, and a
runtime that follows given request stamps (RUNTIME.md "Live and offline")."""

from __future__ import annotations

import dataclasses

from blockplan.bags import TypestoreMessages
from blockplan.config import PlannerConfig
from blockplan.messages.tick import REASONING, TickMessages, reasoning_record
from blockplan.runtime import (
    ConstantVelocityPlanner,
    PlannerRuntime,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.runtime.plans import PlanWindow
from blockplan.types import Observation, Plan
from tests.runtime.test_loop import MS, Drive, _runtime


def test_every_plan_records_the_window_it_was_computed_from() -> None:
    runtime, drive = _runtime("ideal")
    outputs = drive.run(12)
    plan = outputs[-1].new_plans[0]
    window = plan.window
    assert window is not None and window.stamp_ns == plan.stamp_ns == drive.t
    assert window.requested_ns == drive.t
    frames = dict(window.frames)
    assert list(frames) == list(runtime.config.camera_names)  # view order
    period = round(runtime.config.frame_window.frame_period_s * 1e9)
    for stamps in frames.values():  # T = 2 frames, one frame period apart
        assert stamps == (drive.t - period, drive.t)
    # The ego history is the schema's (`runtime.history`: 7 states 0.5 s apart by default),
    # the rows before the first odometry sample holding that sample.
    spec = runtime.history
    step = round(spec.period_s * 1e9)
    ego = window.ego_stamps_ns
    assert len(ego) == spec.num_states and ego[-2:] == (drive.t - step, drive.t)
    assert all(0 <= b - a <= step for a, b in zip(ego, ego[1:], strict=False))
    assert window.route_command == "lane_follow" and not window.is_degraded
    record = reasoning_record(plan)
    assert record["accepted"] is True
    assert record["window"]["frames"]["front"] == [drive.t - period, drive.t]
    assert record["window"]["stamp_ns"] == record["stamp_ns"]


class TooFastPlanner(ConstantVelocityPlanner):
    """Waypoints 20 times too far: every plan fails the speed gate."""

    def plan(self, observation: Observation) -> Plan:
        plan = super().plan(observation)
        return dataclasses.replace(plan, rollouts=plan.rollouts * 20.0)


def test_rejected_plans_come_out_with_their_reason_and_window() -> None:
    runtime, drive = _runtime("ideal", planner=TooFastPlanner())
    outputs = drive.run(6)
    assert all(not o.new_plans for o in outputs)
    rejected = [p for o in outputs for p in o.rejected_plans]
    assert len(rejected) == runtime.metrics()["invalid_plans"] == 6
    assert all(p.window is not None and p.window.stamp_ns == p.stamp_ns for p in rejected)
    record = reasoning_record(rejected[-1])
    assert record["accepted"] is False and "gates" in record["rejected"]
    # The node publishes their reasoning (not their rollouts), as it does for accepted plans.
    messages = TickMessages(TypestoreMessages(), runtime.config).tick(outputs[-1])
    assert [key for key, _ in messages] == ["trajectory", REASONING]


def test_request_windows_are_rebuilt_frame_for_frame() -> None:
    # The run to follow: its windows, as the reasoning records carry them.
    first, drive = _runtime("ideal")
    windows = [p.window for o in drive.run(10) for p in o.new_plans]
    # A window as a live node may see it: the rear camera's newest frame not in yet.
    late = windows[6]
    frames = dict(late.frames)
    frames["rear"] = (frames["rear"][0], frames["rear"][1] - 100 * MS)
    late = dataclasses.replace(late, frames=tuple(frames.items()), route_command="turn_left")
    degraded = dataclasses.replace(windows[8], is_degraded=True, degraded_cameras=("front",))
    missing = dataclasses.replace(windows[4], stamp_ns=windows[4].stamp_ns + 50 * MS)
    wanted = [windows[2], late, degraded, missing]

    config = PlannerConfig()
    clock = VirtualClock(10**9)
    worker = VirtualWorker(ConstantVelocityPlanner(), "ideal", plan_postprocess(config))
    runtime = PlannerRuntime(config, worker, clock, request_windows=wanted)
    outputs = Drive(runtime, clock).run(10)
    plans = [p for o in outputs for p in o.new_plans]
    assert [p.stamp_ns for p in plans] == [w.stamp_ns for w in wanted[:3]]
    assert runtime.metrics()["requests"] == 3
    assert [p.window.frames for p in plans] == [w.frames for w in wanted[:3]]
    assert plans[1].window.route_command == "turn_left"
    assert plans[2].window.degraded_cameras == ("front",) and plans[2].is_degraded
    assert runtime.pending_request_stamps == [missing.stamp_ns]  # no frame at that stamp
    # The JSON form goes both ways.
    assert PlanWindow.from_json(late.to_json()) == late


def test_frames_by_stamp_finds_buffered_frames_and_fills_black_ones() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(8)
    t = drive.t
    wanted = (("front_left", (t - 500 * MS, t)), ("front", (t - 500 * MS, t)))
    frames = runtime.window.frames_by_stamp(wanted, black=("front",))
    assert [(f.camera, f.stamp_ns) for f in frames] == [
        ("front_left", t - 500 * MS),
        ("front_left", t),
        ("front", t - 500 * MS),
        ("front", t),
    ]
    assert not frames[2].image.any()
    assert runtime.window.frames_by_stamp((("front", (t + 1,)),)) is None
    assert runtime.window.frames_by_stamp((("side", (t,)),)) is None
