"""Checks of the ROS-facing files that run without ROS: launch files, params, RViz config."""

import ast

import yaml

from blockplan.config import (
    PlannerConfig,
    config_from_params,
    config_to_params,
    flatten_params,
    read_params_file,
)


def test_launch_files_are_valid_python_with_a_description(repo_root):
    files = sorted((repo_root / "launch").glob("*.launch.py"))
    assert {f.name for f in files} >= {"planner.launch.py", "replay.launch.py"}
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "generate_launch_description" in names, path


def test_planner_launch_declares_documented_arguments(repo_root):
    text = (repo_root / "launch" / "planner.launch.py").read_text()
    for arg in ("params_file", "model_dir", "namespace", "use_sim_time", "rviz", "auto_activate"):
        assert f'"{arg}"' in text
    assert 'executable="planner_node"' in text


def test_every_shipped_parameter_maps_onto_a_config_field(repo_root):
    params = read_params_file(repo_root / "params" / "planner.yaml")
    config = config_from_params(params)  # unknown keys would raise
    shipped = set(flatten_params(params))
    known = set(flatten_params(config_to_params(config)))
    assert shipped == known, f"not shipped: {known - shipped}; unknown: {shipped - known}"


def test_rviz_config_shows_what_the_node_publishes(repo_root):
    doc = yaml.safe_load((repo_root / "rviz" / "blockplan.rviz").read_text())
    displays = doc["Visualization Manager"]["Displays"]
    topics = {d["Topic"]["Value"]: d["Class"] for d in displays if "Topic" in d}
    config = PlannerConfig()
    assert topics[config.topics.trajectory] == "rviz_default_plugins/Path"
    assert topics[config.topics.rollouts] == "rviz_default_plugins/MarkerArray"
    for camera in config.cameras:
        assert topics[camera.topic] == "rviz_default_plugins/Image"
    assert any(d["Class"] == "rviz_default_plugins/TF" for d in displays)


def test_robot_params_and_launch(repo_root):
    params = read_params_file(repo_root / "params" / "robot.yaml")
    config = config_from_params(params)
    assert config.model.embodiment == "robot"
    assert config.control.rate_hz == 30.0  # the chunk rate bar (Fast-dVLA)
    assert config.camera_names == ("front", "wrist")
    assert config.robot.twist_topic == "/servo_node/delta_twist_cmds"
    assert (repo_root / config.model.dir / "config.json").is_file()
    text = (repo_root / "launch" / "robot.launch.py").read_text()
    assert "robot.yaml" in text and "planner.launch.py" in text
