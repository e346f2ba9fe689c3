"""highway-env scenarios with the ego driven by highway-env's own IDM/MOBIL expert.

Each scenario names a registered highway-env environment and the config we run it with.
After `reset(seed)` the ego (an MDPVehicle that would wait for agent actions) is replaced by
an `IDMVehicle` at the same state and route, so the package's IDM (longitudinal) and MOBIL
(lane change) models drive it; the world is then stepped directly (`road.act(); road.step`)
with no agent action at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockplan.errors import UserError

SIM_HZ = 20  # simulation (and odometry) rate

# The expert's lateral control, kept drivable. highway-env steers its vehicles with no bound
# on the heading rate: a lane change starts with the yaw rate stepping to ~1.7 rad/s at
# 20 m/s, a lateral acceleration v * yaw_rate of ~34 m/s² (3.4 g) that no car can drive, our
# own validity gates reject (gates.max_lateral_accel 4.89 m/s², max_yaw_rate 0.95 rad/s) and
# the runtime's odometry check rightly flags as an outlier (RuntimeLimits.max_plausible_accel
# 25 m/s²). The expert therefore changes lanes at most this hard, and its lateral speed
# towards the target lane is bounded like a comfortable human lane change (~3 s for a lane).
EXPERT_MAX_LATERAL_ACCEL = 4.0  # m/s²
EXPERT_MAX_LATERAL_SPEED = 2.0  # m/s


class ScenarioError(UserError, ValueError):
    """An unknown scenario name or a request the scenario cannot serve."""


@dataclass(frozen=True)
class Scenario:
    """One scenario: a highway-env environment id, its config and how the ego is set up.

    ego_speed_range: the expert's target speed is drawn uniformly from it per seed (m/s).
    max_duration_s: longest recorded time (including the label look-ahead) for which the
    road network stays under the ego. warmup_s: simulated but not recorded. spawn_period_s: how often the environment's own
    traffic spawner runs (intersection only; None elsewhere).
    """

    name: str
    env_id: str
    description: str
    config: dict[str, Any] = field(default_factory=dict)
    ego_speed_range: tuple[float, float] = (20.0, 30.0)
    max_duration_s: float = 60.0
    spawn_period_s: float | None = None
    has_junction: bool = False
    warmup_s: float = 2.0  # simulated before t = 0 so the spawn transients settle
    expert_params: dict[str, float] = field(default_factory=dict)  # IDM/MOBIL overrides
    traffic_speed_range: tuple[float, float] | None = None  # other vehicles' target speeds
    vehicles_behind: int = 0  # extra IDM vehicles placed behind the ego (highway-env puts
    # all its traffic ahead), so the rear camera and the labels see traffic from behind


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="highway",
            env_id="highway-v0",
            description="straight 4-lane highway, dense traffic, MOBIL lane changes",
            config={"lanes_count": 4, "vehicles_count": 20, "vehicles_density": 1.0},
            ego_speed_range=(25.0, 30.0),
            max_duration_s=300.0,
            vehicles_behind=6,
            traffic_speed_range=(16.0, 26.0),
            expert_params={"LANE_CHANGE_MIN_ACC_GAIN": 0.05, "LANE_CHANGE_DELAY": 0.5},
        ),
        Scenario(
            name="merge",
            env_id="merge-generic-v1",
            description="2-lane highway with an on-ramp whose traffic merges in front",
            config={
                "lanes_count": 2,
                "vehicles_count": 8,
                "before_merge_length": 150,
                "converge_merge_length": 80,
                "parallel_merge_length": 100,
                "after_merge_length": 800,
            },
            ego_speed_range=(22.0, 30.0),
            max_duration_s=35.0,
        ),
        Scenario(
            name="roundabout",
            env_id="roundabout-generic-v1",
            description="2-lane roundabout: enter, circulate with yielding, exit north",
            config={"vehicles_count": 8},
            ego_speed_range=(6.0, 9.0),
            max_duration_s=26.0,
        ),
        Scenario(
            name="intersection",
            env_id="intersection-v2",
            description="4-way junction with priorities: turns and crossing traffic",
            config={"initial_vehicle_count": 10, "spawn_probability": 0.6},
            ego_speed_range=(6.0, 9.0),
            max_duration_s=22.0,
            warmup_s=1.0,
            spawn_period_s=1.0,
            has_junction=True,
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError as e:
        raise ScenarioError(f"scenario={name!r}: must be one of {sorted(SCENARIOS)}") from e


# highway-env's intersection env writes IDM parameters onto the IDMVehicle *class*; we put
# the package defaults back before every other episode so one process gives the same result
# as another whatever ran before it.
_IDM_CLASS_PARAMS = ("DISTANCE_WANTED", "COMFORT_ACC_MAX", "COMFORT_ACC_MIN")
_idm_defaults: dict[str, float] = {}


def _restore_idm_class_params() -> None:
    from highway_env.vehicle.behavior import IDMVehicle

    if not _idm_defaults:
        _idm_defaults.update({k: getattr(IDMVehicle, k) for k in _IDM_CLASS_PARAMS})
    for key, value in _idm_defaults.items():
        setattr(IDMVehicle, key, value)


def make_env(scenario: Scenario, seed: int) -> Any:
    """A reset highway-env environment (the unwrapped env) whose ego is the IDM/MOBIL expert."""
    import gymnasium as gym
    import highway_env  # noqa: F401  (registers the environments)

    _restore_idm_class_params()
    config = {
        **scenario.config,
        "simulation_frequency": SIM_HZ,
        "policy_frequency": 1,
        "offscreen_rendering": True,
    }
    env = gym.make(scenario.env_id, config=config).unwrapped
    env.reset(seed=int(seed))
    ego = env.vehicle
    expert = drivable_expert_class().create_from(ego)
    rng = np.random.default_rng([int(seed), 7])
    expert.target_speed = expert_target_speed(scenario, seed, rng)
    for key, value in scenario.expert_params.items():  # instance attributes override MOBIL
        setattr(expert, key, value)
    replace_ego(env, expert)
    road = env.road
    _add_vehicles_behind(env, scenario, rng)
    if scenario.traffic_speed_range is not None:  # mixed speeds: overtaking opportunities
        for v in road.vehicles:
            if v is not expert and hasattr(v, "target_speed"):
                v.target_speed = float(rng.uniform(*scenario.traffic_speed_range))
                v.speed = min(float(v.speed), v.target_speed + 2.0)
    return env


def expert_target_speed(
    scenario: Scenario, seed: int, rng: np.random.Generator | None = None
) -> float:
    """The expert's set speed in episode `seed` (m/s): drawn once per seed from
    `scenario.ego_speed_range` and not observed by any planner input; it is the speed the
    expert returns to on a free road (the intersection's own controller changes it near
    the junction). `rng`: the episode's generator, at its first draw."""
    rng = np.random.default_rng([int(seed), 7]) if rng is None else rng
    return float(rng.uniform(*scenario.ego_speed_range))


def replace_ego(env: Any, vehicle: Any) -> None:
    """Put `vehicle` in the ego's place: on the road, as the controlled vehicle, as env.vehicle."""
    road = env.road
    road.vehicles[road.vehicles.index(env.vehicle)] = vehicle
    env.controlled_vehicles = [vehicle]
    env.vehicle = vehicle


_EXPERT_CLASS: list[type] = []


def drivable_expert_class() -> type:
    """highway-env's IDMVehicle (IDM + MOBIL) whose steering keeps the lateral acceleration
    and the lateral speed of a lane change drivable (`EXPERT_MAX_LATERAL_ACCEL`, `..._SPEED`);
    lane keeping and turns are unchanged below those bounds."""
    if _EXPERT_CLASS:
        return _EXPERT_CLASS[0]
    from highway_env import utils
    from highway_env.vehicle.behavior import IDMVehicle

    class DrivableIDMVehicle(IDMVehicle):
        def steering_control(self, target_lane_index: Any) -> float:
            # highway-env 1.12's ControlledVehicle.steering_control with the two bounds added.
            target_lane = self.road.network.get_lane(target_lane_index)
            lane_coords = target_lane.local_coordinates(self.position)
            lane_next_coords = lane_coords[0] + self.speed * self.TAU_PURSUIT
            lane_future_heading = target_lane.heading_at(lane_next_coords)
            lateral_speed = -self.KP_LATERAL * lane_coords[1]
            lateral_speed = np.clip(
                lateral_speed, -EXPERT_MAX_LATERAL_SPEED, EXPERT_MAX_LATERAL_SPEED
            )
            speed = utils.not_zero(self.speed)
            heading_command = np.arcsin(np.clip(lateral_speed / speed, -1, 1))
            heading_ref = lane_future_heading + np.clip(heading_command, -np.pi / 4, np.pi / 4)
            heading_rate = self.KP_HEADING * utils.wrap_to_pi(heading_ref - self.heading)
            max_rate = EXPERT_MAX_LATERAL_ACCEL / max(abs(self.speed), 1.0)
            heading_rate = np.clip(heading_rate, -max_rate, max_rate)
            slip_angle = np.arcsin(np.clip(self.LENGTH / 2 / speed * heading_rate, -1, 1))
            steering = np.arctan(2 * np.tan(slip_angle))
            return float(np.clip(steering, -self.MAX_STEERING_ANGLE, self.MAX_STEERING_ANGLE))

    _EXPERT_CLASS.append(DrivableIDMVehicle)
    return DrivableIDMVehicle


def _add_vehicles_behind(env: Any, scenario: Scenario, rng: np.random.Generator) -> None:
    """Place `scenario.vehicles_behind` IDM vehicles on random lanes of the ego's road,
    25-35 m apart behind it (straight multi-lane roads only)."""
    from highway_env.vehicle.behavior import IDMVehicle

    if scenario.vehicles_behind <= 0:
        return
    ego = env.vehicle
    _from, _to, _ = ego.lane_index
    num_lanes = len(env.road.network.graph[_from][_to])
    s_ego = env.road.network.get_lane(ego.lane_index).local_coordinates(ego.position)[0]
    s = s_ego
    for _ in range(scenario.vehicles_behind):
        s -= float(rng.uniform(25.0, 35.0))
        lane = env.road.network.get_lane((_from, _to, int(rng.integers(num_lanes))))
        vehicle = IDMVehicle(
            env.road,
            lane.position(s, 0.0),
            heading=lane.heading_at(s),
            speed=float(rng.uniform(21.0, 27.0)),
        )
        vehicle.target_speed = vehicle.speed
        vehicle.randomize_behavior()
        env.road.vehicles.append(vehicle)


def spawn_traffic(env: Any, scenario: Scenario) -> None:
    """Run the environment's own traffic bookkeeping (intersection: remove vehicles that
    left, spawn new ones), as its `step()` would do once per policy period."""
    if scenario.name == "intersection":
        env._clear_vehicles()
        env._spawn_vehicle(spawn_probability=env.config["spawn_probability"])
