import json

from tests.optional import importorskip

importorskip("highway_env")

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


def test_the_ego_status_mlp_drives_fitted_on_the_data_set(tmp_path, capsys):
    from blockplan.config import default_params_path, load_config
    from tests.train.conftest import write_dataset

    cameras = tuple(load_config(default_params_path()).camera_names)
    data = write_dataset(tmp_path / "data", {"train": [0, 1, 2]}, cameras=cameras)
    out = tmp_path / "cl.json"
    mlps = ["ego_mlp", "ego_mlp_lane_pose", "ego_mlp_lead", "ego_mlp_beside"]
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
        *mlps,
        "--model",
        "constant-velocity",
        "--data",
        str(data),
        "--json",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    for policy in mlps:
        assert set(doc[policy]) >= KEYS and doc[policy]["episodes"] == 1
        assert doc[policy]["progress_m"] > 10.0
    assert doc["run"]["ego_mlp_data"] == str(data)
    printed = capsys.readouterr().out
    assert "ego_mlp: collisions" in printed and "ego_mlp_lane_pose: collisions" in printed
    assert "ego_mlp_lead: collisions" in printed and "ego_mlp_beside: collisions" in printed


def test_the_ego_status_mlp_needs_a_data_set(tmp_path, capsys):
    argv = ["closed-loop", "--policies", "ego_mlp", "--json", str(tmp_path / "x.json")]
    assert main(argv) == 2
    assert "--data" in capsys.readouterr().err
    argv += ["--data", str(tmp_path / "none")]
    assert main(argv) == 1
    assert "error:" in capsys.readouterr().err


def test_an_unknown_hidden_input_is_refused_naming_the_flag(tmp_path, capsys):
    argv = ["closed-loop", "--policies", "expert", "--hide-inputs", "radar",
            "--json", str(tmp_path / "x.json")]  # fmt: skip
    assert main(argv) == 1
    assert "--hide-inputs='radar'" in capsys.readouterr().err
