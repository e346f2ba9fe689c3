import dataclasses

import numpy as np
import pytest
import torch

from blockplan.sim.dataset import load_shard, sample_observation
from blockplan.train.baselines import EgoMLP, EgoMLPPlanner, constant_velocity
from blockplan.train.examples import load_shards, read_manifest


def test_constant_velocity_is_exact_for_constant_speed(recipe, dataset_dir):
    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    np.testing.assert_allclose(constant_velocity(data), data.future_xy[:, 3::4], atol=1e-6)


def test_ego_mlp_fits_speed_to_waypoints(recipe, dataset_dir):
    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    mlp = EgoMLP.fit(data, len(recipe.schema.route_commands), hidden=32, steps=300, lr=1e-2)
    pred = mlp.predict(data)
    assert pred.shape == (len(data), 5, 2)
    assert np.abs(pred - data.future_xy[:, 3::4]).mean() < 1.0


def test_a_feature_that_hardly_varied_in_training_cannot_blow_up_the_waypoints():
    from blockplan.train.baselines import Standardizer, fit_waypoint_mlp, predict_waypoints

    rng = np.random.default_rng(0)
    x = np.stack([rng.uniform(20, 30, 64), 1e-5 * rng.standard_normal(64)], axis=1)
    future = np.zeros((64, 20, 2))
    future[:, :, 0] = x[:, :1] * np.linspace(0.25, 5, 20)  # x ahead = speed * t
    net, scale = fit_waypoint_mlp(x, future, hidden=16, steps=300, lr=1e-2)
    z = scale(np.array([[25.0, 0.5], [25.0, -0.5], [25.0, 0.0]]))
    assert np.all(z >= scale.lo) and np.all(z <= scale.hi)  # 0.5 is 50,000 sigma: held at the edge
    assert np.allclose(scale(x), (x - scale.mean) / scale.std)  # the training data as it was
    out = predict_waypoints(net, scale, np.array([[25.0, 0.5]]))
    assert np.abs(out).max() < 200  # metres, not kilometres
    assert Standardizer.fit(np.ones((4, 1))).std[0] == 1.0  # a constant column: unit scale


def test_the_lane_pose_mlp_reads_the_pose_and_a_known_flag(recipe, dataset_dir):
    from blockplan.train.baselines import ego_features

    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    plain = ego_features(data, len(recipe.schema.route_commands))
    lane = ego_features(data, len(recipe.schema.route_commands), lane_pose=True)
    np.testing.assert_array_equal(lane[:, : plain.shape[1]], plain)
    np.testing.assert_allclose(lane[:, -3:-1], data.lane_pose)
    assert (lane[:, -1] == 1).all()
    data.lane_pose[0] = np.nan  # unknown: zeros and the flag down
    assert list(ego_features(data, len(recipe.schema.route_commands), True)[0, -3:]) == [0, 0, 0]
    mlp = EgoMLP.fit(data, len(recipe.schema.route_commands), hidden=8, steps=5, lane_pose=True)
    assert mlp.predict(data).shape == (len(data), 5, 2)


def test_the_lead_mlp_reads_the_car_ahead_as_the_ego_encoder_does(recipe, dataset_dir):
    from blockplan.model.ego import LEAD_INPUTS, lead_inputs
    from blockplan.train.baselines import ego_features

    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    commands = len(recipe.schema.route_commands)
    lane = ego_features(data, commands, lane_pose=True)
    lead = ego_features(data, commands, lane_pose=True, lead=True)
    np.testing.assert_array_equal(lead[:, : lane.shape[1]], lane)
    want = lead_inputs(torch.from_numpy(data.lead.astype(np.float64)), (len(data),)).numpy()
    np.testing.assert_array_equal(lead[:, -LEAD_INPUTS:], want)
    assert (want[:, 0] == 1).all() and (want[:, 1] == 0).any() and (want[:, 1] == 1).any()


@pytest.mark.parametrize("lane_pose,lead", [(False, False), (True, False), (True, True)])
def test_the_ego_mlp_planner_plans_what_the_fitted_mlp_predicts_for_each_sample(
    recipe, dataset_dir, lane_pose, lead
):
    """Train/serve parity of the closed-loop baseline: the runtime observation of a data set
    sample goes through the same history rows, lane pose, car ahead and features as the
    sample in training."""
    planner = EgoMLPPlanner.fit(dataset_dir, recipe, steps=50, lane_pose=lane_pose, lead=lead)
    assert planner.reads_lane_pose == lane_pose and planner.reads_lead == lead
    test = load_shards(dataset_dir, "test", recipe, with_images=False)
    expected = planner.mlp.predict(test)  # (N, 5, 2), the open-loop path
    entries = [e for e in read_manifest(dataset_dir)["episodes"] if e["split"] == "test"]
    got = []
    for entry in entries:
        shard = load_shard(dataset_dir / entry["shard"])
        for i in range(entry["num_samples"]):
            observation = sample_observation(shard, i)
            plan = planner.plan(observation)
            assert plan.stamp_ns == observation.stamp_ns
            np.testing.assert_array_equal(plan.rollouts[0], plan.answer.waypoints)
            got.append(plan.answer.waypoints)
    # the training examples hold the lane pose as float32, an observation as float64
    np.testing.assert_allclose(np.stack(got), expected, rtol=0, atol=1e-6 if lane_pose else 1e-9)
    # the plan is the history's: a slower ego's history gives another plan
    first = sample_observation(load_shard(dataset_dir / entries[0]["shard"]), 0)
    slower = [dataclasses.replace(s, x=s.x * 0.5, v_x=s.v_x * 0.5) for s in first.ego_history]
    other = planner.plan(dataclasses.replace(first, ego_history=tuple(slower)))
    assert np.abs(other.answer.waypoints - got[0]).max() > 0.1


def test_the_ego_mlp_planner_refuses_what_it_was_not_fitted_on(recipe, dataset_dir):
    planner = EgoMLPPlanner.fit(dataset_dir, recipe, steps=5)
    entry = read_manifest(dataset_dir)["episodes"][0]
    observation = sample_observation(load_shard(dataset_dir / entry["shard"]), 0)
    with pytest.raises(ValueError, match="route command 'fly'"):
        planner.plan(dataclasses.replace(observation, route_command="fly"))


def test_the_lane_pose_mlp_planner_plans_without_a_lane_pose_as_a_sample_without_one(
    recipe, dataset_dir
):
    planner = EgoMLPPlanner.fit(dataset_dir, recipe, steps=20, lane_pose=True)
    entry = read_manifest(dataset_dir)["episodes"][0]
    observation = sample_observation(load_shard(dataset_dir / entry["shard"]), 1)
    assert observation.lane_pose is not None
    without = dataclasses.replace(observation, lane_pose=None)  # none recent enough
    features = planner.features(without)
    assert list(features[0, -3:]) == [0.0, 0.0, 0.0]  # zeros and the known flag down
    assert (
        np.abs(
            planner.plan(without).answer.waypoints - planner.plan(observation).answer.waypoints
        ).max()
        > 0
    )
