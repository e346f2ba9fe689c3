from __future__ import annotations

import json

import numpy as np
import pytest

from blockplan.sim.fastddrive import FastDDriveError, read_fastddrive_json
from blockplan.types import CRITICAL_OBJECT_KEYS, Lateral, Longitudinal


def _foreign_record(**over):
    answer = {
        "critical_objects": {k: "no" for k in CRITICAL_OBJECT_KEYS} | {"pedestrian": "yes"},
        "explanation": "A pedestrian is crossing; slow down.",
        "future_meta_behavior": {"longitudinal": "decelerate", "lateral": "lane_follow"},
        "trajectory": [[3.1, 0.0], [5.9, 0.1], [8.2, 0.1], [10.0, 0.2], [11.4, 0.2]],
    }
    rec = {
        "id": "wod-1",
        "image": ["cam/front_0.jpg", "cam/front_1.jpg"],
        "conversations": [
            {"from": "human", "value": "<image><image>\\nPlan."},
            {"from": "gpt", "value": json.dumps(answer)},
        ],
    }
    rec.update(over)
    return rec


def test_reads_a_fast_ddrive_record_whose_answer_is_the_gpt_turn(tmp_path) -> None:
    path = tmp_path / "val.json"
    path.write_text(json.dumps([_foreign_record()]))
    (rec,) = read_fastddrive_json(path)
    assert rec.image_paths[0] == tmp_path / "cam/front_0.jpg"
    assert rec.answer.critical_objects["pedestrian"] and not rec.answer.critical_objects["animal"]
    assert rec.answer.longitudinal == Longitudinal.DECELERATE
    assert rec.answer.lateral == Lateral.LANE_FOLLOW
    assert np.allclose(rec.answer.waypoints[-1], [11.4, 0.2])
    assert rec.prompt.startswith("<image>")


def test_a_bad_record_names_itself(tmp_path) -> None:
    bad = _foreign_record(conversations=[{"from": "gpt", "value": "not json"}])
    path = tmp_path / "x.json"
    path.write_text(json.dumps([bad]))
    with pytest.raises(FastDDriveError, match="wod-1"):
        read_fastddrive_json(path)
