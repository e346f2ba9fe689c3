import dataclasses

import pytest
import yaml

from blockplan.config import (
    ConfigError,
    PlannerConfig,
    config_from_params,
    config_to_params,
    default_params_path,
    dump_config,
    flatten_params,
    load_config,
    unflatten_params,
    with_overrides,
)


def test_shipped_params_load_and_match_defaults():
    config = load_config(default_params_path())
    assert config == PlannerConfig()


def test_round_trip_through_yaml(tmp_path):
    config = config_from_params(
        {
            "decoding": {"strategy": "ar"},
            "rollouts": {"num_rollouts": 8, "temperature": 0.7},
            "cameras": {"names": ["front", "rear"], "rear": {"transport": "compressed"}},
        }
    )
    path = tmp_path / "p.yaml"
    path.write_text(dump_config(config))
    again = load_config(path)
    assert again == config
    assert again.cameras[1].transport == "compressed"
    assert again.cameras[0].topic == "/camera/front/image_raw"


def test_flat_ros_names_round_trip():
    params = config_to_params(PlannerConfig())
    flat = flatten_params(params)
    assert flat["decoding.strategy"] == "scaffold_spec"
    assert flat["cameras.names"] == ["front_left", "front", "front_right", "rear"]
    assert unflatten_params(flat) == params
    assert config_from_params(unflatten_params(flat)) == PlannerConfig()


def test_ints_accepted_for_floats():
    assert config_from_params({"control": {"rate_hz": 20}}).control.rate_hz == 20.0


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"model": {"backend": "cuda"}}, "model.backend"),
        ({"model": {"dtype": "int3"}}, "model.dtype"),
        ({"model": {"num_threads": 0}}, "model.num_threads"),
        ({"model": {"dir": ""}}, "model.dir"),
        ({"model": {"device": "gpu"}}, "model.device"),
        ({"model": {"device": "cuda:x"}}, "model.device"),
        ({"model": {"device": "cuda", "backend": "onnxruntime"}}, "model.device"),
        ({"decoding": {"strategy": "beam"}}, "decoding.strategy"),
        ({"decoding": {"confidence_threshold": 1.5}}, "decoding.confidence_threshold"),
        ({"decoding": {"max_denoise_steps": 0}}, "decoding.max_denoise_steps"),
        ({"rollouts": {"num_rollouts": 0}}, "rollouts.num_rollouts"),
        ({"rollouts": {"temperature": -1.0}}, "rollouts.temperature"),
        ({"rollouts": {"max_deviation_m": -1.0}}, "rollouts.max_deviation_m"),
        ({"model": {"embodiment": "drone"}}, "model.embodiment"),
        ({"pipeline": {"add_threshold": 1.5}}, "pipeline.add_threshold"),
        ({"pipeline": {"add_threshold": -0.1}}, "pipeline.add_threshold"),
        (
            {"pipeline": {"add_threshold": 0.8, "activate_threshold": 0.5}},
            "pipeline.activate_threshold",
        ),
        ({"pipeline": {"activate_threshold": 1.2}}, "pipeline.activate_threshold"),
        ({"pipeline": {"semi_confidence": 0.0}}, "pipeline.semi_confidence"),
        ({"pipeline": {"commit_divisor": 0}}, "pipeline.commit_divisor"),
        ({"control": {"rate_hz": 0}}, "control.rate_hz"),
        ({"control": {"max_plan_age_s": -1}}, "control.max_plan_age_s"),
        ({"control": {"timing": "fast"}}, "control.timing"),
        ({"cameras": {"names": []}}, "cameras.names"),
        ({"cameras": {"names": ["a", "a"]}}, "cameras.names"),
        ({"cameras": {"names": ["bad name"]}}, "cameras.name"),
        ({"cameras": {"names": ["f"], "f": {"topic": "rel"}}}, "cameras.f.topic"),
        ({"cameras": {"names": ["f"], "f": {"transport": "h264"}}}, "cameras.f.transport"),
        (
            {"cameras": {"names": ["a", "b"], "a": {"topic": "/x"}, "b": {"topic": "/x"}}},
            "cameras.topic",
        ),
        ({"frame_window": {"num_frames": 0}}, "frame_window.num_frames"),
        ({"frame_window": {"frame_period_s": 0}}, "frame_window.frame_period_s"),
        ({"frame_window": {"max_frame_age_s": float("nan")}}, "frame_window.max_frame_age_s"),
        ({"frame_window": {"stale_camera_policy": "ignore"}}, "frame_window.stale_camera_policy"),
        ({"trajectory": {"dt": 0}}, "trajectory.dt"),
        ({"trajectory": {"dt": 6.0}}, "trajectory.dt"),
        ({"trajectory": {"horizon_s": -5}}, "trajectory.horizon_s"),
        ({"trajectory": {"stitch_duration_s": 5.0}}, "trajectory.stitch_duration_s"),
        ({"trajectory": {"stitch_from": "plan"}}, "trajectory.stitch_from"),
        ({"trajectory": {"stitch_max_error_m": 0.0}}, "trajectory.stitch_max_error_m"),
        ({"trajectory": {"stitch_max_speed_error": -1.0}}, "trajectory.stitch_max_speed_error"),
        ({"gates": {"max_speed": 0}}, "gates.max_speed"),
        ({"gates": {"min_accel": 1.0}}, "gates.min_accel"),
        ({"gates": {"max_accel": -1.0}}, "gates.max_accel"),
        ({"gates": {"max_lateral_accel": 0}}, "gates.max_lateral_accel"),
        ({"gates": {"max_abs_jerk": 0}}, "gates.max_abs_jerk"),
        ({"gates": {"max_yaw_rate": 0}}, "gates.max_yaw_rate"),
        ({"comfort": {"min_accel": 0.0}}, "comfort.min_accel"),
        ({"comfort": {"max_abs_jerk": -1.0}}, "comfort.max_abs_jerk"),
        ({"trajectory": {"waypoint_tolerance_m": -0.1}}, "trajectory.waypoint_tolerance_m"),
        ({"fallback": {"policy": "swerve"}}, "fallback.policy"),
        ({"fallback": {"stop_deceleration": 0}}, "fallback.stop_deceleration"),
        ({"fallback": {"max_hold_age_s": 0}}, "fallback.max_hold_age_s"),
        ({"topics": {"odom": "odom"}}, "topics.odom"),
        ({"frames": {"base_link": ""}}, "frames.base_link"),
        ({"control": {"rate_hz": "fast"}}, "control.rate_hz"),
        ({"rollouts": {"num_rollouts": 2.5}}, "rollouts.num_rollouts"),
        ({"model": {"dir": 3}}, "model.dir"),
    ],
)
def test_validation_errors_name_the_field(params, field):
    with pytest.raises(ConfigError) as info:
        config_from_params(params)
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"decodng": {}}, "decodng"),
        ({"decoding": {"strategyy": "ar"}}, "decoding.strategyy"),
        ({"cameras": {"names": ["front"], "rear": {}}}, "cameras.rear"),
        ({"cameras": {"names": ["front"], "front": {"topik": "/x"}}}, "cameras.front.topik"),
    ],
)
def test_unknown_keys_are_errors_naming_the_key(params, key):
    with pytest.raises(ConfigError, match="unknown parameter") as info:
        config_from_params(params)
    assert key in str(info.value)


def test_file_errors(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: {ros__parameters: {}}\nb: {ros__parameters: {}}\n")
    with pytest.raises(ConfigError, match="name the one"):
        load_config(path)
    assert load_config(path, "b") == PlannerConfig()
    path.write_text("blockplan_planner: {params: {}}\n")
    with pytest.raises(ConfigError, match="ros__parameters"):
        load_config(path)
    # a misspelled node name: the node would ignore the file, so the CLI refuses it too
    path.write_text("blockplan_plannr: {ros__parameters: {control: {rate_hz: 5.0}}}\n")
    with pytest.raises(ConfigError, match="node 'blockplan_plannr', but the planner node is"):
        load_config(path)
    assert load_config(path, "blockplan_plannr").control.rate_hz == 5.0  # named on purpose
    path.write_text("/**: {ros__parameters: {control: {rate_hz: 5.0}}}\n")
    assert load_config(path).control.rate_hz == 5.0
    path.write_text(": : :\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    path.write_text(
        yaml.safe_dump({"blockplan_planner": {"ros__parameters": {"control": {"rate_hz": -1}}}})
    )
    with pytest.raises(ConfigError, match=r"p\.yaml: control\.rate_hz=-1"):
        load_config(path)


def test_config_is_frozen():
    config = PlannerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.control = None  # type: ignore[misc]


def test_overrides_apply_over_the_file_and_are_validated():
    config = load_config(
        default_params_path(),
        overrides=[
            "decoding.strategy=rollouts",
            "model.device=cuda:1",
            "frame_window.streaming=off",
        ],
    )
    assert config.decoding.strategy == "rollouts" and config.model.device == "cuda:1"
    assert config.frame_window.streaming == "off"  # YAML 1.1 would read `off` as False
    for bad in ("decoding.strategy", "model.device=gpu", "nope.key=1"):
        with pytest.raises(ConfigError):
            load_config(default_params_path(), overrides=[bad])


def test_exponent_floats_are_numbers_as_in_ros(tmp_path):
    """PyYAML (YAML 1.1) reads 1.0e3 as a string; ROS 2's parser reads a double."""
    path = tmp_path / "p.yaml"
    path.write_text(
        "blockplan_planner:\n  ros__parameters:\n    control: {rate_hz: 1.0e3, max_plan_age_s: 5e-1}\n"
    )
    config = load_config(path)
    assert config.control.rate_hz == 1000.0 and config.control.max_plan_age_s == 0.5
    assert load_config(path, overrides=["control.rate_hz=2e1"]).control.rate_hz == 20.0


def test_a_key_given_twice_is_an_error(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "blockplan_planner:\n  ros__parameters:\n    control:\n      rate_hz: 5.0\n"
        "      rate_hz: 20.0\n"
    )
    with pytest.raises(ConfigError, match=r"line 5: the key 'rate_hz' is given twice \(lines 4"):
        load_config(path)


def test_override_errors_name_the_override_not_the_file():
    with pytest.raises(ConfigError) as info:
        load_config(default_params_path(), overrides=["control.rate_hzz=5"])
    assert str(info.value).startswith("--set 'control.rate_hzz=5': unknown parameter")
    assert "planner.yaml" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^--set 'control.rate_hz=0': control.rate_hz=0"):
        load_config(default_params_path(), overrides=["decoding.strategy=ar", "control.rate_hz=0"])


@pytest.mark.parametrize(
    "override,text",
    [
        ("a.b=1", "unknown parameter 'a'"),  # no section a: the error names the section
        ("model.dir.x=1", "conflicts with a scalar"),  # under a scalar: raised while unflattening
    ],
)
def test_an_override_under_a_bad_section_is_named_as_the_override(override, text):
    ok = "decoding.strategy=ar"  # a valid override beside it is not blamed
    for how in (
        lambda: load_config(default_params_path(), overrides=[ok, override]),
        lambda: with_overrides(PlannerConfig(), [ok, override]),
    ):
        with pytest.raises(ConfigError) as info:
            how()
        assert str(info.value).startswith(f"--set {override!r}: ") and text in str(info.value)
        assert "planner.yaml" not in str(info.value)


def test_with_params_replaces_by_dotted_name_and_validates():
    from blockplan.config import ConfigError, PlannerConfig

    base = PlannerConfig()
    assert base.with_params({}) == base
    changed = base.with_params({"model.dtype": "float64", "control.rate_hz": 5.0})
    assert (changed.model.dtype, changed.control.rate_hz) == ("float64", 5.0)
    assert changed.decoding == base.decoding and changed.cameras == base.cameras
    with pytest.raises(ConfigError, match="model.dtyp"):
        base.with_params({"model.dtyp": "float64"})
    with pytest.raises(ConfigError, match="control.rate_hz"):
        base.with_params({"control.rate_hz": 0.0})


def test_overrides_apply_to_a_config_and_name_a_bad_one():
    from blockplan.config import with_overrides

    config = PlannerConfig()
    assert with_overrides(config, ()) is config
    hot = with_overrides(config, ["rollouts.temperature=1.0", "rollouts.max_deviation_m=0"])
    assert hot.rollouts.temperature == 1.0 and hot.rollouts.max_deviation_m == 0.0
    assert hot.decoding == config.decoding  # nothing else moves
    with pytest.raises(ConfigError, match="--set 'rollouts.temperature=-1'"):
        with_overrides(config, ["rollouts.temperature=-1"])
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        with_overrides(config, ["rollouts.temperature"])


def test_eval_refuses_a_bad_override_before_loading_data(tmp_path, capsys):
    from blockplan.cli import main

    argv = [
        "eval",
        "--data",
        str(tmp_path / "none"),
        "--model",
        str(tmp_path / "none"),
        "--json",
        str(tmp_path / "x.json"),
        "--set",
        "rollouts.temperature=hot",
    ]
    assert main(argv) == 2
    assert "rollouts.temperature" in capsys.readouterr().err
