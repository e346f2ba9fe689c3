import json

import pytest

pytest.importorskip("highway_env")

from blockplan.cli import main

KEYS = {"collision_rate", "progress_m", "lane_departure_rate", "mean_abs_jerk", "episodes"}


def test_closed_loop_command_writes_the_json_and_frames(tmp_path, capsys):
    out = tmp_path / "cl.json"
    frames = tmp_path / "frames"
    argv = [
        "-q",
        "closed-loop",
        "--scenario",
        "merge",
        "--episodes",
        "1",
        "--seed",
        "3",
        "--duration",
        "1.5",
        "--policies",
        "expert",
        "constant_velocity",
        "--render-dir",
        str(frames),
        "--json",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    for policy in ("expert", "constant_velocity"):
        assert set(doc[policy]) >= KEYS
        assert doc[policy]["episodes"] == 1
        assert doc[policy]["progress_m"] > 10.0
    assert "model" not in doc
    assert doc["run"]["seeds"] == [3]
    assert sorted(p.name for p in frames.glob("*.png")) == ["merge-3_000.png", "merge-3_001.png"]
    assert "constant_velocity: collisions" in capsys.readouterr().out


def test_bad_episode_count_is_refused(tmp_path):
    argv = ["closed-loop", "--episodes", "0", "--json", str(tmp_path / "x.json")]
    assert main(argv) == 2


def test_bad_replan_period_is_refused(tmp_path):
    argv = [
        "closed-loop",
        "--replan-period",
        "0.33",
        "--policies",
        "expert",
        "--json",
        str(tmp_path / "x.json"),
    ]
    assert main(argv) == 1


def test_set_overrides_reach_the_config(tmp_path, capsys):
    argv = [
        "closed-loop",
        "--policies",
        "expert",
        "--json",
        str(tmp_path / "x.json"),
        "--set",
        "decoding.strategy=beam",
    ]
    assert main(argv) == 1
    assert "decoding.strategy" in capsys.readouterr().err
