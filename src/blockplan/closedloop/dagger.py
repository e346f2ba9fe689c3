"""On-policy samples (DAgger): the states a planner drives into, labelled by the expert.

A data set recorded with the expert only shows states the expert reaches; a planner that
drifts off the expert's path meets states no sample covers, and its errors compound (the
closed-loop failures in docs/BENCHMARKS.md). Here the planner drives a closed-loop episode
exactly as `blockplan closed-loop` runs it (`PlannerDriver`: the runtime, the tracking
controller). Every `branch_every_s` the world is copied and, in the copy, the ego is handed
back to the IDM/MOBIL expert for the 5 s label horizon. Each branch becomes one `EpisodeLog`:
the recorded past (expert warm-up, then the planner's driving) followed by the expert's
continuation, so `episode_samples` renders and labels it like any recorded episode: the
history and the frames are what the planner saw, the answer is what the expert did next.

A branch whose expert crashes in its 5 s is left out; so is everything after a collision or
a lane departure of the planner.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockplan.closedloop.episode import EpisodeSpec, PlannerDriver
from blockplan.closedloop.route import route_command
from blockplan.closedloop.world import DT, ClosedLoopWorld
from blockplan.config import PlannerConfig
from blockplan.runtime import RuntimePlanner
from blockplan.sim.episode import (
    EGO_YAW,
    EpisodeLog,
    ObjectRegistry,
    box_arrays,
    ego_row,
    other_objects,
    pose_of,
)
from blockplan.sim.labels import HORIZON_S
from blockplan.sim.rig import Rig
from blockplan.sim.roadmap import road_map_from_network
from blockplan.sim.scenarios import (
    SIM_HZ,
    Scenario,
    drivable_expert_class,
    replace_ego,
    spawn_traffic,
)

# Recorded before t = 0 (the expert's warm-up), so the first branches have a full history.
PAST_S = 3.0


@dataclass
class _Step:
    ego: list[float]
    lane: tuple[str, str, int]
    junction: bool
    pose: tuple[float, float]
    boxes: dict[int, tuple[float, float, float, float]]
    route_path: np.ndarray


@dataclass
class DaggerEpisode:
    """branches: one log per branch point (t0 of its sample = `branch_t0[k]` in the log's
    time; log time 0 is scenario time `log_start_s`), with the route command the runtime had
    then (`branch_command`: the closed loop's route, not the log's look-ahead, which a 5 s
    continuation cuts short). planner_end: why and when (scenario
    time) the planner's drive ended."""

    log_start_s: float = 0.0
    branches: list[EpisodeLog] = field(default_factory=list)
    branch_t0: list[float] = field(default_factory=list)
    branch_command: list[str] = field(default_factory=list)
    expert_crashes: int = 0
    planner_end: dict[str, Any] = field(default_factory=dict)


def _record(env: Any, registry: ObjectRegistry, route: list[tuple] | None = None) -> _Step:
    row, lane, junction, pose, path = ego_row(env, route)
    boxes = {registry.object_id(o, k): pose_of(o) for o, k in other_objects(env)}
    return _Step(row, lane, junction, pose, boxes, path)


def expert_route(
    network: Any, route: list[tuple], lane_index: tuple, position: np.ndarray
) -> tuple[tuple, list[tuple] | None]:
    """The lane the expert takes over in and the rest of the episode's `route` it follows
    from there (None: no route, it follows the road).

    - On a road of the route: the route from that road on.
    - On a road off the route that leaves the node one of the route's roads leaves (where a
      roundabout's exit leaves its ring, highway-env may put the ego on either): the
      route's road, in its lane nearest the ego, as `sim/route_path.py` reads it.
    - Off the route for real (the planner took another exit): the shortest way from there to
      the route's end where the road network has one, else none.
    """
    lane = tuple(lane_index)
    route = [tuple(r) for r in route]
    if not route:
        return lane, None
    roads = [r[:2] for r in route]
    if lane[:2] in roads:
        return lane, route[roads.index(lane[:2]) :]
    for k, (a, b) in enumerate(roads):
        if a == lane[0] and a in network.graph and b in network.graph[a]:
            lanes = network.graph[a][b]
            nearest = min(range(len(lanes)), key=lambda j: lanes[j].distance(position))
            return (a, b, nearest), route[k:]
    path = network.shortest_path(lane[1], route[-1][1])
    if not path:
        return lane, None
    return lane, [lane] + [(a, b, None) for a, b in zip(path[:-1], path[1:], strict=True)]


def _hand_back(env: Any, expert_state: dict[str, Any], route: list[tuple]) -> None:
    """In `env` (a copy), replace the controlled ego by the expert at the same state, on
    what is left of its route (`route`: the episode's, as `ClosedLoopWorld.route`)."""
    ego = env.vehicle
    lane, remaining = expert_route(env.road.network, route, ego.lane_index, ego.position)
    expert = drivable_expert_class()(
        env.road,
        ego.position,
        heading=ego.heading,
        speed=ego.speed,
        target_lane_index=lane,
        route=remaining,
    )
    for key, value in expert_state.items():
        setattr(expert, key, value)
    replace_ego(env, expert)


def _branch_registry(world_env: Any, env: Any, registry: ObjectRegistry) -> ObjectRegistry:
    """A registry for the copy whose objects keep the ids of their originals."""
    branch = ObjectRegistry()
    branch.static = list(registry.static)
    for (orig, kind), (twin, _) in zip(other_objects(world_env), other_objects(env), strict=True):
        branch.ids[id(twin)] = registry.object_id(orig, kind)
    return branch


def _log(
    scenario: Scenario,
    seed: int,
    steps: list[_Step],
    static: list,
    road: Any,
) -> EpisodeLog:
    s = len(steps)
    boxes, present = box_arrays([st.boxes for st in steps], len(static))
    ego = np.asarray([st.ego for st in steps], dtype=np.float64)
    ego[:, EGO_YAW] = np.unwrap(ego[:, EGO_YAW])
    return EpisodeLog(
        scenario=scenario.name,
        seed=int(seed),
        dt=DT,
        t=np.arange(s) * DT,
        ego=ego,
        ego_lane=[st.lane for st in steps],
        ego_in_junction=np.asarray([st.junction for st in steps], dtype=bool),
        boxes=boxes,
        present=present,
        box_static=static,
        road=road,
        crashed_at=None,
        lane_pose=np.asarray([st.pose for st in steps], dtype=np.float64),
        route_path=[st.route_path for st in steps],
    )


def _expert_branch(
    world: ClosedLoopWorld, registry: ObjectRegistry, expert_state: dict[str, Any]
) -> tuple[list[_Step], list] | None:
    """The expert's 5 s from the world's state now (in a copy): its recorded steps after
    now and the objects' static boxes, or None if the expert crashes."""
    env = copy.deepcopy(world.env)
    branch = _branch_registry(world.env, env, registry)
    _hand_back(env, expert_state, world.route)
    steps, index = [], world.step_index
    spawn_every = world.spawn_every
    for _ in range(int(round(HORIZON_S * SIM_HZ))):
        env.road.act()
        env.road.step(DT)
        index += 1
        if spawn_every and index % spawn_every == 0:
            spawn_traffic(env, world.scenario)
        if env.vehicle.crashed:
            env.close()
            return None
        steps.append(_record(env, branch))
    env.close()
    return steps, branch.static


def run_dagger_episode(
    spec: EpisodeSpec,
    planner: RuntimePlanner,
    config: PlannerConfig,
    rig: Rig,
    branch_every_s: float = 1.0,
    first_branch_s: float = 0.5,
) -> DaggerEpisode:
    """The planner drives `spec`'s episode; every `branch_every_s` from `first_branch_s`
    (scenario time) on, while 5 s of the episode remain, the expert takes over in a copy."""
    if not branch_every_s > 0 or first_branch_s < 0:
        raise ValueError("branch_every_s must be > 0 and first_branch_s >= 0")
    world = ClosedLoopWorld(spec.scenario, spec.seed)
    out = DaggerEpisode()
    try:
        expert = world.env.vehicle
        expert_state = {
            key: getattr(expert, key)
            for key in ("target_speed", *spec.scenario.expert_params)
            if hasattr(expert, key)
        }
        driver = PlannerDriver(world, spec, planner, config, rig)
        try:
            _drive(world, spec, driver, expert_state, branch_every_s, first_branch_s, out)
        finally:
            driver.close()
    finally:
        world.close()
    return out


def _drive(
    world: ClosedLoopWorld,
    spec: EpisodeSpec,
    driver: PlannerDriver,
    expert_state: dict[str, Any],
    branch_every_s: float,
    first_branch_s: float,
    out: DaggerEpisode,
) -> None:
    registry = ObjectRegistry()
    road = road_map_from_network(world.env.road.network)
    past: list[_Step] = []
    record_from = -int(round(PAST_S * SIM_HZ))
    every = max(int(round(branch_every_s * SIM_HZ)), 1)
    first = int(math.ceil(first_branch_s * SIM_HZ - 1e-9))
    last_branch = spec.last_step - int(round(HORIZON_S * SIM_HZ))
    while True:
        i = world.step_index
        driver.feed()
        if i >= record_from:  # before the takeover: the row holds the expert's last action
            if not past:
                out.log_start_s = round(world.t, 6)
            past.append(_record(world.env, registry, world.route))
        if i == 0:
            driver.take_control()
        if i >= 0:
            pose = world.ego_pose()
            if not world.on_road():
                out.planner_end = {"reason": "lane_departure", "t": round(world.t, 3)}
                return
            if i > last_branch:
                out.planner_end = {"reason": "end", "t": round(world.t, 3)}
                return
            if i >= first and (i - first) % every == 0:
                branch = _expert_branch(world, registry, expert_state)
                if branch is None:
                    out.expert_crashes += 1
                else:
                    steps, static = branch
                    log = _log(world.scenario, spec.seed, past + steps, static, road)
                    out.branches.append(log)
                    out.branch_t0.append(round((len(past) - 1) * DT, 6))
                    ego = world.env.vehicle
                    out.branch_command.append(
                        route_command(
                            world.env.road.network, world.route, ego.position, float(ego.speed)
                        )
                    )
            if i % spec.replan_every == 0:
                driver.replan(pose)
            if i % spec.control_every == 0:
                driver.control(pose)
        world.step()
        if world.crashed:
            if world.step_index <= 0:
                out.planner_end = {"reason": "warmup_crash", "t": round(world.t, 3)}
            else:
                out.planner_end = {"reason": "collision", "t": round(world.t, 3)}
            return


_PLANNERS: dict[str, tuple[Any, Any]] = {}


def policy(model: str) -> tuple[Any, Any]:
    """(planner, config) of `model` with the shipped params, loaded once per process (the
    data set writer's workers)."""
    if model not in _PLANNERS:
        from blockplan.config import default_params_path, load_config
        from blockplan.planner.loading import load_model

        config = load_config(default_params_path())
        _PLANNERS[model] = (load_model(model, config, where="--policy-model"), config)
    return _PLANNERS[model]


def branch_arrays(
    log: EpisodeLog, t0: float, command: str, rig: Rig, options: Any, fits: Any = None
) -> dict[str, np.ndarray] | None:
    """The one sample of a branch (frames as `options` say) with the runtime's route
    command; None when the expert backs up in its future."""
    from blockplan.sim.dataset import DatasetOptions, episode_samples

    one = DatasetOptions(
        scenarios=(log.scenario,),
        episodes=1,
        duration_s=log.duration,
        num_frames=options.num_frames,
        frame_period_s=options.frame_period_s,
        start_s=t0,
    )
    arrays, _ = episode_samples(log, rig, one, fits)
    if arrays is not None:
        arrays["route_command"] = np.asarray([command])
    return arrays


def dagger_samples(
    options: Any, rig: Rig, scenario: str, seed: int
) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """One episode of on-policy samples under data set `options` (`DatasetOptions` with
    `policy_model`): (shard arrays or None, facts for the manifest entry)."""
    from blockplan.sim.labels import explanation_budget_fits
    from blockplan.sim.scenarios import get_scenario

    planner, config = policy(options.policy_model)
    spec = EpisodeSpec(get_scenario(scenario), seed, options.duration_s)
    episode = run_dagger_episode(spec, planner, config, rig, options.branch_every_s)
    fits = explanation_budget_fits()
    parts = []
    for log, t0, command in zip(
        episode.branches, episode.branch_t0, episode.branch_command, strict=True
    ):
        arrays = branch_arrays(log, t0, command, rig, options, fits)
        if arrays is not None:  # None: the expert backs up in the branch
            parts.append(arrays)
    info = {
        "planner_end": episode.planner_end,
        "branches": len(episode.branches),
        "branch_expert_crashes": episode.expert_crashes,
    }
    if not parts:
        return None, info
    per_sample = [k for k, v in parts[0].items() if k not in ("camera_names", "scenario", "seed")]
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in per_sample}
    for k in ("camera_names", "scenario", "seed"):
        arrays[k] = parts[0][k]
    return arrays, info
