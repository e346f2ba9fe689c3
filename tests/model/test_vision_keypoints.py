"""The spatial-softmax keypoint token of the small vision tower (docs/ALGORITHMS.md §8.1)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from blockplan.model.config import ModelConfigError
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.vision import SmallCNN, VisionConfig, VisionTower

ROBOT_VISION = VisionConfig(image_height=64, image_width=64, channels=(16, 32, 64), grid=(4, 4))


def test_keypoints_add_one_token_and_only_then_a_config_key():
    plain, points = ROBOT_VISION, dataclasses.replace(ROBOT_VISION, keypoints=8)
    assert (plain.tokens_per_image, points.tokens_per_image) == (16, 17)
    assert "keypoints" not in plain.to_dict()  # folders without keypoints keep their config
    assert VisionConfig.from_dict(points.to_dict()) == points
    assert VisionConfig.from_dict(plain.to_dict()) == plain
    with pytest.raises(ModelConfigError, match="keypoints"):
        VisionConfig(keypoints=-1)
    tower = VisionTower(points, width=32, num_cameras=2, num_frames=1)
    assert tower(torch.randn(2, 3, 64, 64)).shape == (2, 17, 32)


def test_the_expected_position_is_where_the_map_peaks():
    """A map that is high at one cell and low elsewhere puts its point at that cell's
    centre; two equal peaks put it halfway; x runs along columns, y along rows."""
    cnn = SmallCNN(dataclasses.replace(ROBOT_VISION, keypoints=2))
    assert cnn.keypoint_stage == 1  # stride 4: 16 x 16 cells of a 64 x 64 image
    with torch.no_grad():
        cnn.keypoint_conv.weight.zero_()
        cnn.keypoint_conv.bias.zero_()
        cnn.keypoint_conv.weight[0, 0] = 1.0  # map 0 reads channel 0, map 1 channel 1
        cnn.keypoint_conv.weight[1, 1] = 1.0
        cnn.keypoint_log_temperature.fill_(5.0)  # a sharp softmax
    features = torch.zeros(1, 32, 16, 16)
    features[0, 0, 3, 10] = 10.0
    features[0, 1, 8, 2] = features[0, 1, 8, 6] = 10.0
    points = cnn.keypoint_positions(features)[0]
    centre = lambda i: (i + 0.5) * 2 / 16 - 1  # noqa: E731
    torch.testing.assert_close(points[0], torch.tensor([centre(10), centre(3)]))
    torch.testing.assert_close(points[1], torch.tensor([centre(4), centre(8)]))


def test_a_spot_moved_inside_one_grid_cell_moves_the_keypoints():
    """What the points are for: a 2-pixel spot moved 11 pixels inside one 16-pixel grid
    cell moves the points (random weights, a sharp softmax) along x, not along y."""
    torch.manual_seed(0)
    cnn = SmallCNN(dataclasses.replace(ROBOT_VISION, keypoints=8)).eval()
    with torch.no_grad():
        cnn.keypoint_log_temperature.fill_(4.0)
    images = -torch.ones(2, 3, 64, 64)
    images[0, 0, 20:22, 17:19] = 1.0  # grid cell (row 1, col 1) in both
    images[1, 0, 20:22, 28:30] = 1.0
    with torch.no_grad():
        points = cnn.keypoint_positions(cnn.features(images)[1])  # (2, 8, 2)
    moved = (points[1] - points[0]).abs().max(dim=0).values  # (2,): x, y
    assert moved[0] > 0.1 and moved[1] < moved[0]


def test_a_planner_model_with_keypoints_round_trips_its_config():
    from blockplan.model.presets import robot_preset_config

    config = robot_preset_config("robot-test", 64, ("front", "wrist"), 1, 4, {})
    config = dataclasses.replace(config, vision=dataclasses.replace(config.vision, keypoints=4))
    again = PlannerModelConfig.from_dict(config.to_dict())
    assert again.vision.keypoints == 4 and again.tokens_per_image == 5
    model = PlannerModel(again)
    images = torch.randn(2, 3, 16, 16)
    assert model.visual(images).shape == (2, 5, again.decoder.hidden_size)
