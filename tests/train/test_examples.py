import json

import numpy as np
import pytest
from PIL import Image

from blockplan.schema import parse_answer
from blockplan.train.examples import DataError, load_examples, load_shards, resample_history


def test_shards_encode_to_fixed_length_examples(recipe, dataset_dir):
    data = load_shards(dataset_dir, "train", recipe)
    P, A = len(recipe.template), len(recipe.scaffold)
    v = recipe.model_config.vision
    assert len(data) == 12
    assert data.prompt_ids.shape == (12, P) and data.answer_ids.shape == (12, A)
    assert data.images.shape == (12, 4, v.image_height, v.image_width, 3)
    assert data.images.dtype == np.uint8
    answer = parse_answer(data.answer_ids[0], recipe.scaffold, recipe.tokenizer, recipe.schema)
    np.testing.assert_allclose(answer.waypoints, data.future_xy[0, 3::4], atol=0.006)
    np.testing.assert_allclose(data.velocity[0], [10.0, 0.0], atol=1e-6)  # seed 0: 10 m/s
    batch = data.batch([0, 2])
    assert batch["images"].shape[0] == 2 and batch["prompt_ids"].dtype.is_floating_point is False


def test_missing_split_is_a_data_error(recipe, dataset_dir):
    with pytest.raises(DataError, match="no episodes in split 'nope'"):
        load_shards(dataset_dir, "nope", recipe)


def test_history_resampling():
    class S:
        history_period_s, num_history = 0.5, 3

    rows = np.arange(7)[:, None] * np.ones((7, 6))  # t = -3.0 .. 0.0
    np.testing.assert_allclose(resample_history(rows, 0.5, S)[:, 0], [4, 5, 6])
    np.testing.assert_allclose(resample_history(rows, 0.25, S)[:, 0], [2, 4, 6])


def test_fastddrive_records_load_like_shards(recipe, tmp_path):
    paths = []
    for k in range(4):
        p = tmp_path / f"img{k}.jpg"
        Image.fromarray(np.full((24, 32, 3), 40 * k, np.uint8)).save(p)
        paths.append(p.name)
    record = {
        "id": "r0",
        "image": paths,
        "conversations": [],
        "ego_history": (np.arange(7)[:, None] * [0, 0, 1, 0, 0, 0]).tolist(),
        "future_waypoints": [[5.0 * t, 0.0] for t in range(1, 6)],
        "meta_behavior": {"longitudinal": "keep", "lateral": "lane_follow"},
        "critical_objects": {"nearby_vehicle": "yes"},
        "explanation": "Follow the lane.",
        "route_command": "lane_follow",
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps([record, record]))
    data = load_examples(path, "train", recipe)
    assert len(data) == 2
    assert data.images.shape[1] == 4
    np.testing.assert_allclose(data.velocity[0], [6.0, 0.0])  # newest history row
    np.testing.assert_allclose(data.future_xy[0, 3::4, 0], [5, 10, 15, 20, 25], atol=1e-6)
    answer = parse_answer(data.answer_ids[0], recipe.scaffold, recipe.tokenizer, recipe.schema)
    assert answer.critical_objects["nearby_vehicle"] and not answer.critical_objects["animal"]
    bad = dict(record, image=paths[:2])
    path.write_text(json.dumps([bad]))
    with pytest.raises(DataError, match="2 images"):
        load_examples(path, "train", recipe)
