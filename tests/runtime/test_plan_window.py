"""Which window each plan used (`PlanWindow`), rejected plans in the tick output, and a
runtime that follows given request stamps (RUNTIME.md "Live and offline")."""

from __future__ import annotations

import dataclasses

from blockplan.bags import TypestoreMessages
from blockplan.bags.tick import REASONING, TickMessages, reasoning_record
from blockplan.config import PlannerConfig
from blockplan.runtime import ConstantVelocityPlanner, PlannerRuntime, VirtualClock
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
    assert window.ego_stamps_ns == (drive.t - period, drive.t)
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


def test_request_stamps_make_requests_only_for_those_windows() -> None:
    config = PlannerConfig()
    clock = VirtualClock(10**9)
    start = 10**9
    wanted = [start + 300 * MS, start + 700 * MS, start + 50 * MS]  # the last matches no frame
    runtime = PlannerRuntime(
        config, ConstantVelocityPlanner(), clock, "ideal", request_stamps=wanted
    )
    drive = Drive(runtime, clock, start_ns=start)
    outputs = drive.run(10)
    planned = [p.stamp_ns for o in outputs for p in o.new_plans]
    assert planned == wanted[:2]
    assert runtime.metrics()["requests"] == 2
    assert runtime.pending_request_stamps == [wanted[2]]
    # Without stamps nothing changes: a request at every tick.
    runtime, drive = _runtime("ideal")
    drive.run(10)
    assert runtime.metrics()["requests"] == 10 and runtime.pending_request_stamps == []
