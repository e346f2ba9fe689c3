"""The controller tracks a curved plan in closed loop: a planner that replays the expert's
own path (on an empty roundabout) keeps the ego on the road where constant velocity leaves it.

The expert's path at the roundabout entry exceeds the default validity gates (lateral
acceleration up to ~7.6 m/s², yaw rate ~1.3 rad/s once JMT-upsampled), so this test, which
is about tracking, relaxes the gates; see docs/BENCHMARKS.md. Seed 1 is a known miss: the
1 s waypoints JMT-upsampled through the entry's S-curve cut the corner by ~1 m where the
expert itself passes 0.6 m from the lane edge, and the ego's centre leaves the lanes.
"""

import dataclasses

import numpy as np
import pytest

from tests.optional import importorskip

importorskip("highway_env")

from blockplan.closedloop import (
    ClosedLoopWorld,
    EpisodeSpec,
    run_expert_episode,
    run_planner_episode,
)
from blockplan.config import default_params_path, load_config
from blockplan.planner.loading import load_model
from blockplan.sim.labels import to_ego_frame
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import SIM_HZ, get_scenario
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    DrivingAnswer,
    Lateral,
    Longitudinal,
    Plan,
)

DURATION_S = 8.0


def _empty_road(env):
    env.road.vehicles[:] = [env.vehicle]


def _expert_path(scenario, seed):
    """(S, 2) REP-103 positions of the expert on the empty road, warm-up included."""
    world = ClosedLoopWorld(scenario, seed)
    _empty_road(world.env)
    path = []
    try:
        while world.t <= DURATION_S + 6.0:
            p = world.ego_pose()
            path.append((p.x, p.y))
            world.step()
    finally:
        world.close()
    return np.asarray(path)


class PathPlanner:
    """The expert's own future: its positions 1..5 s after the path point nearest the ego."""

    def __init__(self, path):
        self.path = path  # (S, 2) at SIM_HZ

    def plan(self, observation):
        ego = observation.ego_history[-1]
        i = int(np.argmin(np.linalg.norm(self.path - [ego.x, ego.y], axis=1)))
        idx = np.minimum(i + SIM_HZ * np.arange(1, 6), len(self.path) - 1)  # (5,)
        xy = self.path[idx]  # (5, 2)
        waypoints = to_ego_frame(xy, ego.x, ego.y, ego.yaw)  # (5, 2)
        answer = DrivingAnswer(
            critical_objects=dict.fromkeys(CRITICAL_OBJECT_KEYS, False),
            explanation="follow the path",
            longitudinal=Longitudinal.KEEP,
            lateral=Lateral.LANE_FOLLOW,
            waypoints=waypoints,
        )
        return Plan(stamp_ns=observation.stamp_ns, answer=answer, rollouts=waypoints[None])


def test_a_curved_plan_is_tracked_where_constant_velocity_departs():
    scenario, seed = get_scenario("roundabout"), 0
    config, rig = load_config(default_params_path()), load_rig()
    gates = dataclasses.replace(
        config.gates, max_lateral_accel=20.0, max_abs_jerk=50.0, max_yaw_rate=5.0
    )
    config = dataclasses.replace(config, gates=gates)
    spec = EpisodeSpec(scenario, seed, duration_s=DURATION_S, replan_period_s=0.5)
    expert = run_expert_episode(spec, on_reset=_empty_road)
    tracked = run_planner_episode(
        spec, "path", PathPlanner(_expert_path(scenario, seed)), config, rig, on_reset=_empty_road
    )
    cv = run_planner_episode(
        spec, "cv", load_model("constant-velocity", config), config, rig, on_reset=_empty_road
    )
    assert not expert.departed and not expert.collided
    assert cv.departed
    assert not tracked.departed and not tracked.collided
    assert tracked.counters["plans"] == tracked.counters["ticks"]
    assert tracked.progress_m == pytest.approx(expert.progress_m, rel=0.1)
