import numpy as np

from blockplan.train.baselines import EgoMLP, constant_velocity
from blockplan.train.examples import load_shards


def test_constant_velocity_is_exact_for_constant_speed(recipe, dataset_dir):
    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    np.testing.assert_allclose(constant_velocity(data), data.future_xy[:, 3::4], atol=1e-6)


def test_ego_mlp_fits_speed_to_waypoints(recipe, dataset_dir):
    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    mlp = EgoMLP.fit(data, len(recipe.schema.route_commands), hidden=32, steps=300, lr=1e-2)
    pred = mlp.predict(data)
    assert pred.shape == (len(data), 5, 2)
    assert np.abs(pred - data.future_xy[:, 3::4]).mean() < 1.0


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
