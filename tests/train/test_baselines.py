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
