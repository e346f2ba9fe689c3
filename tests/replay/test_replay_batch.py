"""`blockplan replay A B ...`: one folder per bag, each as if replayed alone, and a summary."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from blockplan.cli import main
from blockplan.replay.batch import bag_name
from tests.replay.bagmaker import BagSpec, make_bag

SAME = ("ticks", "plans", "fallbacks", "evaluated_plans", "ade_3s", "ade_5s")


def _replay(args: list[str]) -> int:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(["replay", *args, "--timing", "ideal", "--no-progress"])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("model", ["constant-velocity", "random-init:test-stream"])
def test_several_bags_replay_as_if_alone_and_are_summarised(tmp_path: Path, model, capsys) -> None:
    """Each bag's metrics equal a replay of that bag alone (a streaming model is reset
    between bags: its counters and stream start over), and summary.json aggregates them."""
    bags = [
        make_bag(
            tmp_path / "straight.mcap",
            BagSpec(duration_s=7.0, curvature=0.0, with_ground_truth=True),
        ),
        make_bag(
            tmp_path / "curve.mcap", BagSpec(duration_s=7.0, curvature=0.03, with_ground_truth=True)
        ),
    ]
    common = ["--model", model, "--rate", "2.5", "--set", "model.num_threads=1"]
    assert _replay([*map(str, bags), "--out", str(tmp_path / "all"), *common]) == 0
    printed = capsys.readouterr().out
    assert "2 bags (0 failed)" in printed and "summary" in printed
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert summary["model"] == model and summary["timing"] == "ideal"
    rows = summary["per_bag"]
    assert [Path(r["out"]).name for r in rows] == ["straight", "curve"]
    for bag, row in zip(bags, rows, strict=True):
        assert _replay([str(bag), "--out", str(tmp_path / f"alone-{bag.stem}"), *common]) == 0
        alone = json.loads((tmp_path / f"alone-{bag.stem}" / "metrics.json").read_text())
        together = json.loads((tmp_path / "all" / bag.stem / "metrics.json").read_text())
        assert {k: together.get(k) for k in SAME} == {k: alone.get(k) for k in SAME}
        assert {k: row.get(k) for k in SAME} == {k: alone.get(k) for k in SAME}
        assert together["counters"]["invalid_plans"] == alone["counters"]["invalid_plans"]
        if model != "constant-velocity":
            stream, solo = together["streaming"]["planner"], alone["streaming"]["planner"]
            assert stream["prefill"] == solo["prefill"]  # counters and stream start over
    agg = summary["aggregate"]
    assert agg["bags"] == 2 and agg["failed"] == 0
    assert agg["ticks"] == sum(r["ticks"] for r in rows)
    assert agg["fallback_fraction"] == pytest.approx(agg["fallbacks"] / agg["ticks"], abs=1e-4)
    if model != "constant-velocity":
        return  # random weights: the gates reject every plan, nothing to score
    assert agg["scored_bags"] == 2
    assert agg["ade_5s_mean"] == pytest.approx(
        statistics.fmean(r["ade_5s"] for r in rows), abs=1e-3
    )
    assert agg["worst_ade_5s"] == max(r["ade_5s"] for r in rows)


def test_a_bag_that_cannot_be_read_stops_the_batch_before_any_replay(
    tmp_path: Path, capsys
) -> None:
    good = make_bag(tmp_path / "good.mcap", BagSpec(duration_s=2.0))
    broken = tmp_path / "broken.mcap"
    broken.write_bytes(good.read_bytes()[:200])  # truncated
    out = tmp_path / "out"
    args = [str(good), str(broken), "--model", "constant-velocity", "--out", str(out)]
    assert _replay(args) == 1
    assert "broken.mcap" in capsys.readouterr().err
    assert not (out / "good" / "plans.mcap").exists()  # the cheap checks come first


def test_bags_of_the_same_name_and_one_bag_options_are_refused(tmp_path: Path, capsys) -> None:
    a = make_bag(tmp_path / "a" / "run.mcap", BagSpec(duration_s=1.0))
    b = make_bag(tmp_path / "b" / "run.mcap", BagSpec(duration_s=1.0))
    base = [str(a), str(b), "--model", "constant-velocity", "--out", str(tmp_path / "o")]
    assert _replay(base) == 1
    assert "same name run" in capsys.readouterr().err
    c = make_bag(tmp_path / "c.mcap", BagSpec(duration_s=1.0))
    assert _replay([str(a), str(c), "--out", str(tmp_path / "o"), "--requests", str(a)]) == 1
    assert "--requests belongs to one bag" in capsys.readouterr().err
    assert bag_name("x/rec.db3") == "rec" and bag_name("x/rosbag2_folder") == "rosbag2_folder"
