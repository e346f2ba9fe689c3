"""`blockplan train --extra-data`: more data set folders join --data's splits."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from blockplan.cli import main
from blockplan.train.examples import DataError, concat_examples, load_shards

from .conftest import write_dataset


def test_concat_keeps_every_sample_in_order(recipe, dataset_dir, tmp_path):
    other = write_dataset(tmp_path / "other", {"train": [7], "val": [8]})
    a, b = load_shards(dataset_dir, "train", recipe), load_shards(other, "train", recipe)
    both = concat_examples([a, b])
    assert len(both) == len(a) + len(b)
    np.testing.assert_array_equal(both.prompt_ids[len(a) :], b.prompt_ids)
    np.testing.assert_array_equal(both.future_xy[: len(a)], a.future_xy)
    assert list(both.episode[-1:]) == ["highway-7"]
    assert concat_examples([a]) is a
    with pytest.raises(DataError):
        concat_examples([])


def _train(data, out, *extra: str) -> int:
    argv = ["-q", "train", "--data", str(data), "--out", str(out), "--arch", "test"]
    argv += ["--cameras", "front", "rear", "--steps", "1", "--batch-size", "2", "--warmup", "1"]
    argv += ["--save-every", "1", "--val-samples", "2", "--num-threads", "1", *extra]
    return main(argv)


def test_train_reads_the_extra_folders(dataset_dir, tmp_path, caplog):
    other = write_dataset(tmp_path / "other", {"train": [7], "val": [8]})
    with caplog.at_level(logging.INFO, logger="blockplan"):
        assert _train(dataset_dir, tmp_path / "run", "--extra-data", str(other)) == 0
    assert "16 train samples" in caplog.text  # 3 + 1 episodes of 4 samples
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["event"] == "done"


def test_extra_data_with_other_frame_spacing_is_refused(dataset_dir, tmp_path, capsys):
    other = write_dataset(tmp_path / "other", {"train": [7]})
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["options"] = {"frame_period_s": 0.25}
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert _train(dataset_dir, tmp_path / "run", "--extra-data", str(other)) == 2
    assert "frames 0.25 s apart" in capsys.readouterr().err


def test_extra_data_is_refused_for_a_robot_run(dataset_dir, tmp_path, capsys):
    argv = ["-q", "train", "--embodiment", "robot", "--data", str(dataset_dir)]
    argv += ["--out", str(tmp_path / "run"), "--steps", "1", "--extra-data", str(dataset_dir)]
    assert main(argv) == 2
    assert "vehicle data sets only" in capsys.readouterr().err
