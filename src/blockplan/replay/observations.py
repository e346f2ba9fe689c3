"""The observations the control loop builds from a recorded bag, in order.

`bag_observations` replays the bag in ideal timing (a plan requested at every tick) with a
planner that only records what it is asked: each request's `Observation`, exactly as the
runtime assembled it from its buffers (the frame window, the ego history over `schema`'s
span, the route command, the lane pose, the car ahead, the lanes beside and the route ahead
when asked for). What a planner sees on a real
sequence at the control rate, for benchmarks (`blockplan bench --bag`) and for train/serve
parity tests.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from blockplan.config import PlannerConfig
from blockplan.runtime import ConstantVelocityPlanner
from blockplan.schema.spec import DrivingSchema
from blockplan.types import Observation, Plan


class RecordingPlanner(ConstantVelocityPlanner):
    """The constant-velocity baseline answering, with `schema` (which decides the ego history
    the runtime builds) and, with `reads_lane_pose` / `reads_lead` / `reads_beside` /
    `reads_route`, given the lane pose / the car ahead / the lanes beside / the route ahead as
    a model that reads it is; keeps every observation it is asked to plan, by stamp."""

    def __init__(
        self,
        schema: DrivingSchema,
        reads_lane_pose: bool = False,
        reads_lead: bool = False,
        reads_beside: bool = False,
        reads_route: bool = False,
    ) -> None:
        self.schema = schema
        self.reads_lane_pose = reads_lane_pose
        self.reads_lead = reads_lead
        self.reads_beside = reads_beside
        self.reads_route = reads_route
        self.seen: dict[int, Observation] = {}

    def plan(self, observation: Observation) -> Plan:
        self.seen[observation.stamp_ns] = observation
        return super().plan(observation)


def bag_observations(
    bag: str | Path,
    config: PlannerConfig,
    schema: DrivingSchema,
    reads_lane_pose: bool = False,
    reads_lead: bool = False,
    reads_beside: bool = False,
    reads_route: bool = False,
) -> list[Observation]:
    """Every observation a plan was requested for while replaying `bag` in ideal timing at
    `config`'s control rate, oldest first."""
    from blockplan.replay.driver import replay_bag

    planner = RecordingPlanner(schema, reads_lane_pose, reads_lead, reads_beside, reads_route)
    with tempfile.TemporaryDirectory(prefix="blockplan-observations-") as out:
        replay_bag(bag, Path(out) / "replay", planner, config, "ideal")
    return [planner.seen[stamp] for stamp in sorted(planner.seen)]
