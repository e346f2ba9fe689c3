"""The closed-loop world: a highway-env scenario whose ego a controller drives.

`make_env` (blockplan.sim) sets the scenario up with the IDM/MOBIL expert as the ego; every
policy shares that start and the expert's warm-up. At t = 0 a planner policy swaps the
expert for highway-env's kinematic `Vehicle` (the vehicle class of its `ContinuousAction`)
at the same state, and from then on only normalised (acceleration, steering) actions move it.
Everything read back is converted to REP-103 here (y and yaw change sign).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from blockplan.sim.episode import ObjectRegistry, lane_pose, other_objects, pose_of
from blockplan.sim.labels import beside_vehicles, lead_vehicle
from blockplan.sim.roadmap import lanes_beside, network_roads
from blockplan.sim.route_path import route_path
from blockplan.sim.scenarios import SIM_HZ, Scenario, make_env, replace_ego, spawn_traffic
from blockplan.sim.world import (
    KIND_VEHICLE,
    EgoPose,
    Snapshot,
    hw_to_rep_yaw,
)
from blockplan.types import EgoState, seconds_to_ns

DT = 1.0 / SIM_HZ
# Stamps start here so the warm-up (negative scenario time) still has positive stamps.
STAMP_OFFSET_S = 100.0


class ClosedLoopWorld:
    """One episode's highway-env world, stepped at SIM_HZ. `t` is scenario time (0 = end of
    the warm-up); `stamp_ns(t)` is the sensor time the runtime sees."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self.env = make_env(scenario, seed)
        self.route = [tuple(r) for r in (getattr(self.env.vehicle, "route", None) or [])]
        self.step_index = -int(round(scenario.warmup_s * SIM_HZ))
        self.action_type: Any = None
        self._objects = ObjectRegistry()
        self.spawn_every = round(scenario.spawn_period_s * SIM_HZ) if scenario.spawn_period_s else 0

    @property
    def t(self) -> float:
        return self.step_index * DT

    @property
    def ego(self) -> Any:
        return self.env.vehicle

    @property
    def crashed(self) -> bool:
        return bool(self.env.vehicle.crashed)

    def take_control(self, acceleration_range: tuple[float, float], steering_range_rad: float):
        """Replace the expert ego by a controllable kinematic vehicle at the same state."""
        from highway_env.envs.common.action import ContinuousAction

        action_type = ContinuousAction(
            self.env,
            acceleration_range=acceleration_range,
            steering_range=(-steering_range_rad, steering_range_rad),
        )
        ego = action_type.vehicle_class.create_from(self.env.vehicle)
        replace_ego(self.env, ego)
        self.action_type = action_type
        return action_type

    def act(self, action: np.ndarray) -> None:
        """(2,) normalised [acceleration, steering] in [-1, 1] (highway-env's convention:
        positive steering turns towards highway-env's +y, the driver's right)."""
        self.action_type.act(np.asarray(action, dtype=np.float64))

    def step(self) -> None:
        """One SIM_HZ step of every vehicle (the ego repeats its last action)."""
        self.env.road.act()
        self.env.road.step(DT)
        self.step_index += 1
        if self.spawn_every and self.step_index % self.spawn_every == 0:
            spawn_traffic(self.env, self.scenario)

    # ------------------------------------------------------------------ read-back (REP-103)

    def ego_pose(self) -> EgoPose:
        v = self.env.vehicle
        return EgoPose(
            float(v.position[0]), float(-v.position[1]), hw_to_rep_yaw(v.heading), float(v.speed)
        )

    def ego_state(self, yaw_rate: float = 0.0) -> EgoState:
        p = self.ego_pose()
        return EgoState(self.stamp_ns(), p.x, p.y, p.yaw, p.speed, yaw_rate=yaw_rate)

    def lane_pose(self) -> tuple[float, float]:
        """The ego's (left-positive offset, heading error) in its own lane, as the data set
        and the simulated bags record it (sim/episode.py `lane_pose`): the localisation."""
        return lane_pose(self.env)

    def lead(self) -> tuple[float, float]:
        """The car ahead in the ego's lane (gap m, infinite when none; its speed m/s), as the
        data set and the simulated bags record it (sim/labels.py `lead_vehicle`): the
        tracker."""
        x, y, yaw, _ = pose_of(self.env.vehicle)
        return lead_vehicle(x, y, yaw, self._vehicles())

    def beside(self) -> np.ndarray:
        """(2, 5) the lanes beside, as the data set and the simulated bags record them
        (sim/labels.py `log_lanes_beside`): per side the map's lane count, then the
        tracker's nearest cars ahead and behind in the lane line beside."""
        ego = self.env.vehicle
        lanes = lanes_beside(network_roads(self.env.road.network), ego.lane_index)
        x, y, yaw, _ = pose_of(ego)
        cars = beside_vehicles(x, y, yaw, self._vehicles())
        return np.concatenate([np.asarray(lanes, dtype=np.float64)[:, None], cars], axis=1)

    def route_path(self) -> np.ndarray:
        """(P, 2) the route ahead in odom, as the data set and the simulated bags record it
        (sim/route_path.py): what the router publishes."""
        ego = self.env.vehicle
        return route_path(self.env.road.network, self.route, ego.lane_index, ego.position)

    def _vehicles(self) -> np.ndarray:
        """(M, 4) [x, y, yaw, speed] of the other vehicles (odom)."""
        rows = [pose_of(obj) for obj, kind in other_objects(self.env) if kind == KIND_VEHICLE]
        return np.reshape(rows, (-1, 4))

    def stamp_ns(self, t: float | None = None) -> int:
        return seconds_to_ns(STAMP_OFFSET_S + (self.t if t is None else t))

    def lane_offset(self) -> float:
        """The ego centre's lateral offset (m) from the centre line of its closest lane."""
        net, pos = self.env.road.network, self.env.vehicle.position
        return float(net.get_lane(net.get_closest_lane_index(pos)).local_coordinates(pos)[1])

    def on_road(self) -> bool:
        """Whether the ego's centre is on some lane of the road network."""
        net, pos = self.env.road.network, self.env.vehicle.position
        return bool(net.get_lane(net.get_closest_lane_index(pos)).on_lane(pos))

    def snapshot(self) -> Snapshot:
        """The world now, for the renderer."""
        boxes = []
        for obj, kind in other_objects(self.env):
            box = self._objects.static[self._objects.object_id(obj, kind)]
            x, y, yaw, speed = pose_of(obj)
            boxes.append(dataclasses.replace(box, x=x, y=y, yaw=yaw, speed=speed))
        return Snapshot(t=self.t, ego=self.ego_pose(), boxes=tuple(boxes))

    def close(self) -> None:
        self.env.close()
