"""Short closed-loop episodes on highway-env (a few simulated seconds each)."""

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
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import get_scenario


@pytest.fixture(scope="module")
def config():
    return load_config(default_params_path())


@pytest.fixture(scope="module")
def rig():
    return load_rig()


def _empty_road(env):
    """Only the ego is left on the road."""
    env.road.vehicles[:] = [env.vehicle]


def _stopped_car_ahead(distance_m):
    def setup(env):
        ego = env.vehicle
        lane = env.road.network.get_lane(ego.lane_index)
        s = lane.local_coordinates(ego.position)[0]
        from highway_env.vehicle.kinematics import Vehicle

        ahead = s + distance_m
        car = Vehicle(env.road, lane.position(ahead, 0.0), lane.heading_at(ahead), 0.0)
        env.road.vehicles.append(car)

    return setup


def test_constant_velocity_on_an_empty_straight_road_progresses_on_the_road(config, rig):
    spec = EpisodeSpec(get_scenario("highway"), seed=0, duration_s=3.0, replan_period_s=0.5)
    cv = load_model("constant-velocity", config)
    result = run_planner_episode(spec, "constant_velocity", cv, config, rig, on_reset=_empty_road)
    assert not result.collided and not result.departed
    assert result.simulated_s == pytest.approx(3.0)
    assert result.progress_m > 3.0 * 15.0  # highway speeds (25-30 m/s expert start)
    assert result.counters["plans"] == result.counters["ticks"] == 6
    assert result.counters["fallbacks"] == 0
    assert result.mean_abs_jerk < 1.0


def test_a_collision_is_detected_and_ends_the_episode(config, rig):
    spec = EpisodeSpec(get_scenario("highway"), seed=0, duration_s=8.0, replan_period_s=0.5)
    cv = load_model("constant-velocity", config)
    result = run_planner_episode(
        spec,
        "constant_velocity",
        cv,
        config,
        rig,
        on_reset=_empty_road,
        on_start=_stopped_car_ahead(40.0),
    )
    assert result.collided
    assert result.simulated_s < 4.0


def test_the_expert_drives_the_same_start_without_a_planner():
    spec = EpisodeSpec(get_scenario("highway"), seed=0, duration_s=3.0)
    result = run_expert_episode(spec, on_reset=_empty_road)
    assert not result.collided and not result.departed
    assert result.progress_m > 3.0 * 15.0
    assert result.counters == {}


def test_off_road_is_detected():
    world = ClosedLoopWorld(get_scenario("highway"), seed=0)
    try:
        assert world.on_road()
        world.env.vehicle.position = world.env.vehicle.position + np.array([0.0, 40.0])
        assert not world.on_road()
    finally:
        world.close()


def _shifted_in_lane(offset_m):
    """The ego moved `offset_m` sideways of its lane's centre line, heading along the lane."""

    def setup(env):
        ego, net = env.vehicle, env.road.network
        lane = net.get_lane(ego.lane_index)
        s = lane.local_coordinates(ego.position)[0]
        ego.position = lane.position(s, offset_m)
        ego.heading = lane.heading_at(s)

    return setup


def test_the_lane_offset_is_the_distance_from_the_lane_centre():
    world = ClosedLoopWorld(get_scenario("highway"), seed=0)
    try:
        _shifted_in_lane(1.2)(world.env)
        assert world.lane_offset() == pytest.approx(1.2, abs=1e-6)
        _shifted_in_lane(-0.7)(world.env)
        assert world.lane_offset() == pytest.approx(-0.7, abs=1e-6)
    finally:
        world.close()


def test_lane_keeping_tells_a_drift_from_a_return_to_the_centre(config, rig):
    """Started 1 m off its lane's centre: constant velocity does not come back (its
    velocity estimate even takes in some of the jump), the expert steers back to the
    centre line."""
    spec = EpisodeSpec(get_scenario("highway"), seed=0, duration_s=4.0, replan_period_s=0.5)
    cv = load_model("constant-velocity", config)
    start = {"on_reset": _empty_road, "on_start": _shifted_in_lane(1.0)}
    held = run_planner_episode(spec, "constant_velocity", cv, config, rig, **start)
    back = run_expert_episode(spec, **start)
    assert held.mean_abs_lane_offset_m > 0.7  # measured 0.89 (max 1.96)
    assert held.max_abs_lane_offset_m > 1.0
    assert back.max_abs_lane_offset_m == pytest.approx(1.0, abs=0.1)
    assert back.mean_abs_lane_offset_m < 0.3  # measured 0.17


def test_episode_periods_must_be_whole_simulation_steps():
    with pytest.raises(ValueError, match="replan_period_s"):
        EpisodeSpec(get_scenario("highway"), seed=0, replan_period_s=0.33)
    with pytest.raises(ValueError, match="duration_s"):
        EpisodeSpec(get_scenario("highway"), seed=0, duration_s=0.0)


@pytest.mark.slow
def test_a_random_init_model_drives_through_the_runtime(config, rig):
    spec = EpisodeSpec(get_scenario("merge"), seed=0, duration_s=1.0, replan_period_s=1.0)
    model = load_model("random-init:tiny", config, require_manifest=False)
    frames = []
    result = run_planner_episode(
        spec, "model", model, config, rig, frame_sink=lambda t, images: frames.append(images)
    )
    assert result.counters["ticks"] == 1
    # A plan or, for an invalid one, the fallback: either way the ego is driven.
    assert (
        result.counters["plans"]
        + result.counters["invalid_plans"]
        + result.counters["planner_errors"]
        == 1
    )
    assert result.progress_m > 0.0
    assert frames and set(frames[0]) == set(config.camera_names)


class _ReadsEveryInput:
    """Constant velocity that asks for every optional input and keeps what it was given."""

    reads_lane_pose = reads_lead = reads_beside = reads_route = True

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def plan(self, observation):
        o = observation
        self.seen.append((o.lane_pose, o.lead, o.beside, o.route_ahead))
        return self.inner.plan(observation)

    def reset(self):
        pass


@pytest.mark.parametrize(
    "hidden",
    [(), ("lane-pose",), ("lead", "beside"), ("lane-pose", "lead", "beside"), ("route",)],
)
def test_hidden_inputs_never_reach_the_planner(config, rig, hidden):
    spec = EpisodeSpec(
        get_scenario("highway"), seed=0, duration_s=2.0, hidden_inputs=frozenset(hidden)
    )
    planner = _ReadsEveryInput(load_model("constant-velocity", config))
    run_planner_episode(spec, "constant_velocity", planner, config, rig)
    assert planner.seen
    lane, lead, beside, route = zip(*planner.seen, strict=True)
    assert all((v is None) == ("lane-pose" in hidden) for v in lane)
    assert all((v is None) == ("lead" in hidden) for v in lead)
    assert all((v is None) == ("beside" in hidden) for v in beside)
    assert all((v is None) == ("route" in hidden) for v in route)


def test_the_route_ahead_in_closed_loop_is_what_the_data_set_records(config, rig):
    """A planner that reads the route gets, at each plan, the route ahead computed from the
    world's route path as the data set computes it from a log (sim/labels.py), and at the
    roundabout it bends."""
    from blockplan.closedloop import ClosedLoopWorld
    from blockplan.trajectory import Pose2D
    from blockplan.trajectory.route import route_ahead

    spec = EpisodeSpec(get_scenario("roundabout"), seed=0, duration_s=4.0)
    planner = _ReadsEveryInput(load_model("constant-velocity", config))
    run_planner_episode(spec, "constant_velocity", planner, config, rig)
    routes = [seen[3] for seen in planner.seen]
    assert routes and all(r is not None for r in routes)
    assert max(abs(r[-1][1]) for r in routes) > 10.0  # the ring turns away from straight
    world = ClosedLoopWorld(get_scenario("roundabout"), 0)
    try:
        while world.t < -1e-9:  # the expert's warm-up, to t = 0: the first plan's instant
            world.step()
        e = world.ego_pose()
        want = route_ahead(world.route_path(), Pose2D(e.x, e.y, e.yaw))
    finally:
        world.close()
    np.testing.assert_allclose(routes[0], want, atol=1e-9)


def test_an_unknown_hidden_input_is_refused():
    with pytest.raises(ValueError, match="hidden_inputs='camera'"):
        EpisodeSpec(get_scenario("highway"), seed=0, hidden_inputs=frozenset({"camera"}))
