"""Run one scenario with the expert and record the whole world state at the simulation rate.

The log is plain arrays in REP-103 so labels, rendering, bags and data sets never touch
highway-env objects. An episode in which the ego (the expert) crashes is flagged with the
crash time; callers drop such episodes and count them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockplan.sim.roadmap import RoadMap, road_map_from_network
from blockplan.sim.route_path import route_path
from blockplan.sim.scenarios import SIM_HZ, Scenario, ScenarioError, make_env, spawn_traffic
from blockplan.sim.world import (
    KIND_OBSTACLE,
    KIND_VEHICLE,
    OBSTACLE_HEIGHT_M,
    VEHICLE_HEIGHT_M,
    Box,
    EgoPose,
    Snapshot,
    hw_to_rep_yaw,
    wrap_angle,
)

# Car paint colours (RGB), picked per vehicle from its id.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (200, 30, 30),
    (30, 80, 190),
    (235, 235, 235),
    (55, 55, 62),
    (160, 160, 168),
    (235, 185, 20),
    (40, 140, 65),
    (130, 50, 150),
    (220, 110, 25),
    (90, 170, 215),
)
OBSTACLE_COLOR = (240, 110, 20)

# Columns of `EpisodeLog.ego`.
EGO_X, EGO_Y, EGO_YAW, EGO_SPEED, EGO_ACCEL, EGO_LAT = range(6)
# Columns of `EpisodeLog.boxes`.
BOX_X, BOX_Y, BOX_YAW, BOX_SPEED = range(4)


@dataclass
class EpisodeLog:
    """A recorded episode, S steps at `dt`.

    t: (S,) seconds since the start. ego: (S, 6) x, y, yaw, speed, accel, lateral_left
    (the ego's left-positive offset from lane 0 of its road, for lane-change labels).
    ego_lane: S lane indices ("from", "to", id). ego_in_junction: (S,) bool.
    boxes: (S, M, 4) x, y, yaw, speed of the M other objects; present: (S, M) bool.
    box_static: M Boxes holding the per-object constants (kind, size, colour).
    crashed_at: time of the ego's crash (negative: during the warm-up), or None.
    perturbed: (S,) bool, True where the action applied from step i to i + 1 had a steering
    perturbation added (`Perturbation`); None: an unperturbed expert throughout.
    lane_pose: (S, 2) the ego's pose relative to its own lane (the one highway-env assigns it
    at each step): the left-positive offset (m) from the lane's centre line and the heading
    error (rad, REP-103 yaw minus the lane's heading at the ego's station); what a vehicle's
    localisation against its map provides. Training uses it as an auxiliary target only.
    route_path: S (P, 2) polylines, the route ahead of the ego at each step as a router
    would publish it (`blockplan.sim.route_path`, REP-103 odom).
    """

    scenario: str
    seed: int
    dt: float
    t: np.ndarray
    ego: np.ndarray
    ego_lane: list[tuple[str, str, int]]
    ego_in_junction: np.ndarray
    boxes: np.ndarray
    present: np.ndarray
    box_static: list[Box]
    road: RoadMap
    crashed_at: float | None
    perturbed: np.ndarray | None = field(default=None)
    lane_pose: np.ndarray | None = field(default=None)
    route_path: list[np.ndarray] | None = field(default=None)

    def is_clean(self, i0: int, i1: int) -> bool:
        """Whether the states i0 .. i1 all follow from the expert's own actions (no
        perturbation acted between them)."""
        return self.perturbed is None or not bool(self.perturbed[i0:i1].any())

    @property
    def num_steps(self) -> int:
        return int(self.t.shape[0])

    @property
    def duration(self) -> float:
        return float(self.t[-1])

    def index_at(self, t: float) -> int:
        """The step nearest to time t (clamped to the log)."""
        return int(np.clip(round(t / self.dt), 0, self.num_steps - 1))

    def snapshot(self, i: int) -> Snapshot:
        e = self.ego[i]
        ego = EgoPose(float(e[EGO_X]), float(e[EGO_Y]), float(e[EGO_YAW]), float(e[EGO_SPEED]))
        boxes = []
        for j in np.flatnonzero(self.present[i]):
            b, s = self.boxes[i, j], self.box_static[j]
            boxes.append(
                Box(
                    s.id,
                    s.kind,
                    float(b[BOX_X]),
                    float(b[BOX_Y]),
                    float(b[BOX_YAW]),
                    float(b[BOX_SPEED]),
                    s.length,
                    s.width,
                    s.height,
                    s.color,
                )
            )
        return Snapshot(t=float(self.t[i]), ego=ego, boxes=tuple(boxes))


class ObjectRegistry:
    """Stable integer ids for highway-env objects, with each object's static box (size,
    height, colour; pose zero) in `static[id]`. The recorder and the closed-loop world share
    it, so an object looks the same in data sets and in closed loop."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.static: list[Box] = []

    def object_id(self, obj: Any, kind: str) -> int:
        key = id(obj)
        if key not in self.ids:
            j = len(self.static)
            self.ids[key] = j
            is_vehicle = kind == KIND_VEHICLE
            self.static.append(
                Box(
                    id=j,
                    kind=kind,
                    x=0.0,
                    y=0.0,
                    yaw=0.0,
                    speed=0.0,
                    length=float(obj.LENGTH),
                    width=float(obj.WIDTH),
                    height=VEHICLE_HEIGHT_M if is_vehicle else OBSTACLE_HEIGHT_M,
                    color=PALETTE[(j * 7 + 3) % len(PALETTE)] if is_vehicle else OBSTACLE_COLOR,
                )
            )
        return self.ids[key]


def other_objects(env: Any) -> list[tuple[Any, str]]:
    """Every road user but the ego (vehicles, then solid obstacles) with its kind."""
    others = [(v, KIND_VEHICLE) for v in env.road.vehicles if v is not env.vehicle]
    others += [(o, KIND_OBSTACLE) for o in env.road.objects if getattr(o, "solid", False)]
    return others


class _Recorder(ObjectRegistry):
    """Accumulates per-step states of the other road users."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[int, tuple[float, float, float, float]]] = []

    def record(self, env: Any) -> None:
        self.rows.append({self.object_id(o, k): pose_of(o) for o, k in other_objects(env)})

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return box_arrays(self.rows, len(self.static))


def box_arrays(
    rows: list[dict[int, tuple[float, float, float, float]]], num_objects: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step {object id: pose} rows as `EpisodeLog.boxes` (S, M, 4) and `.present` (S, M)."""
    s, m = len(rows), max(num_objects, 1)
    boxes = np.zeros((s, m, 4))
    present = np.zeros((s, m), dtype=bool)
    for i, row in enumerate(rows):
        for j, pose in row.items():
            boxes[i, j] = pose
            present[i, j] = True
    return boxes, present


def pose_of(obj: Any) -> tuple[float, float, float, float]:
    """x, y, yaw (REP-103) and speed of a highway-env object."""
    x, y = obj.position
    return float(x), float(-y), hw_to_rep_yaw(float(obj.heading)), float(obj.speed)


def ego_row(
    env: Any, route: list[tuple] | None = None
) -> tuple[list[float], tuple[str, str, int], bool, tuple[float, float], np.ndarray]:
    """The ego's recorded row now (the `EGO_*` columns), its lane index, whether it is in a
    junction, its lane pose (left-positive offset m, heading error rad) and the route ahead
    of it (`route_path`; `route`: the ego's highway-env route, default the vehicle's own):
    what the recorder and the on-policy branches log per step."""
    v = env.vehicle
    if route is None:
        route = getattr(v, "route", None)
    lane_index = tuple(v.lane_index)
    lane0 = env.road.network.get_lane((lane_index[0], lane_index[1], 0))
    lateral_right = float(lane0.local_coordinates(v.position)[1])
    x, y, yaw, speed = pose_of(v)
    accel = float(v.action.get("acceleration", 0.0))
    in_junction = lane_index[0].startswith("ir")  # intersection: lanes inside the junction
    path = route_path(env.road.network, route, lane_index, v.position)
    return [x, y, yaw, speed, accel, -lateral_right], lane_index, in_junction, lane_pose(env), path


def lane_pose(env: Any) -> tuple[float, float]:
    """The ego's (left-positive offset from its lane's centre, heading error) in REP-103."""
    v = env.vehicle
    lane = env.road.network.get_lane(v.lane_index)
    station, lateral_right = lane.local_coordinates(v.position)
    error = wrap_angle(hw_to_rep_yaw(float(v.heading)) - hw_to_rep_yaw(lane.heading_at(station)))
    return -float(lateral_right), float(error)


@dataclass(frozen=True)
class Perturbation:
    """Steering added to the expert's own for a while, so the log holds the expert's recovery
    from a state it would not have reached itself (docs/SIM.md "Recovery samples")."""

    start_s: float  # into the recording
    duration_s: float
    steering_rad: float

    def covers(self, t: float) -> bool:
        return self.start_s <= t < self.start_s + self.duration_s


def perturbation_schedule(
    seed: int, duration_s: float, every_s: float, horizon_s: float
) -> tuple[Perturbation, ...]:
    """Perturbations about `every_s` apart (jittered ±25 %; the first within the first
    `every_s`), each 0.4-0.8 s of 0.02-0.06 rad to either side (about 0.1-1.5 m off the
    expert's path at highway speed before it steers back), none so late that the
    `horizon_s` after it leaves the recording. Drawn from the seed alone: reproducible."""
    rng = np.random.default_rng([int(seed), 0x5EED])
    events: list[Perturbation] = []
    t = every_s * float(rng.uniform(0.5, 1.0))
    while True:
        length = float(rng.uniform(0.4, 0.8))
        steer = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.02, 0.06))
        if t + length + horizon_s > duration_s:
            return tuple(events)
        events.append(Perturbation(round(t, 2), round(length, 2), round(steer, 4)))
        t += length + every_s * float(rng.uniform(0.75, 1.25))


def run_episode(
    scenario: Scenario,
    seed: int,
    duration_s: float,
    perturbations: tuple[Perturbation, ...] = (),
) -> EpisodeLog:
    """Simulate the scenario's warm-up, then record `duration_s` seconds (stops early at an
    ego crash) and return the log. `perturbations` add steering to the expert's action
    during the recording (never the warm-up); the log marks the steps they acted on."""
    if not 0 < duration_s <= scenario.max_duration_s:
        raise ScenarioError(
            f"duration={duration_s}: scenario {scenario.name!r} supports (0, "
            f"{scenario.max_duration_s}] s including the 5 s label look-ahead"
        )
    env = make_env(scenario, seed)
    road = road_map_from_network(env.road.network)
    dt = 1.0 / SIM_HZ
    num_steps = int(round(duration_s * SIM_HZ)) + 1
    spawn_every = round(scenario.spawn_period_s * SIM_HZ) if scenario.spawn_period_s else 0
    recorder = _Recorder()
    ego_rows, lanes, junction, perturbed, poses, paths = [], [], [], [], [], []
    crashed_at = None
    num_warmup = int(round(scenario.warmup_s * SIM_HZ))
    for i in range(num_warmup):
        env.road.act()
        env.road.step(dt)
        if spawn_every and (i + 1) % spawn_every == 0:
            spawn_traffic(env, scenario)
        if env.vehicle.crashed:
            crashed_at = (i + 1 - num_warmup) * dt  # negative: during the warm-up
            break
    for i in range(0 if crashed_at is not None else num_steps):
        row, lane, in_junction, pose, path = ego_row(env)
        ego_rows.append(row)
        lanes.append(lane)
        junction.append(in_junction)
        poses.append(pose)
        paths.append(path)
        recorder.record(env)
        if env.vehicle.crashed:
            crashed_at = i * dt
            break
        if i == num_steps - 1:
            break
        env.road.act()
        steer = sum(p.steering_rad for p in perturbations if p.covers(i * dt))
        if steer:
            env.vehicle.action["steering"] = float(env.vehicle.action["steering"]) + steer
        perturbed.append(bool(steer))
        env.road.step(dt)
        if spawn_every and (i + 1) % spawn_every == 0:
            spawn_traffic(env, scenario)
    env.close()
    if not ego_rows:  # crashed during the warm-up: record the crash state only
        row, lane, in_junction, pose, path = ego_row(env)
        ego_rows, lanes, junction, poses, paths = [row], [lane], [in_junction], [pose], [path]
        recorder.record(env)
    boxes, present = recorder.arrays()
    ego = np.asarray(ego_rows)
    ego[:, EGO_YAW] = np.unwrap(ego[:, EGO_YAW])
    return EpisodeLog(
        scenario=scenario.name,
        seed=int(seed),
        dt=dt,
        t=np.arange(len(ego_rows)) * dt,
        ego=ego,
        ego_lane=lanes,
        ego_in_junction=np.asarray(junction, dtype=bool),
        boxes=boxes,
        present=present,
        box_static=recorder.static,
        road=road,
        crashed_at=crashed_at,
        perturbed=np.asarray(perturbed + [False] * (len(ego_rows) - len(perturbed)), dtype=bool)
        if perturbations
        else None,
        lane_pose=np.asarray(poses, dtype=np.float64),
        route_path=paths,
    )
