"""Parameter specs from the config tree, and their way back into a config (no rclpy)."""

import pytest

from blockplan.config import (
    DTYPES,
    STRATEGIES,
    ConfigError,
    PlannerConfig,
    config_to_params,
    flatten_params,
    load_config,
    read_params_file,
)
from blockplan.ros.params import (
    CHOICES,
    MODEL_DIR_OVERRIDE,
    RANGES,
    base_parameter_specs,
    camera_parameter_specs,
    camera_subscription,
    config_from_values,
    is_node_parameter,
    node_topic,
    parameter_specs,
    unknown_parameters,
)


def _all_specs(names=None):
    base = base_parameter_specs()
    names = names or next(s.default for s in base if s.name == "cameras.names")
    return {s.name: s for s in [*base, *camera_parameter_specs(names)]}


def _defaults(specs):
    return {name: spec.default for name, spec in specs.items()}


def test_specs_cover_every_config_field_and_the_model_override():
    fields = set(flatten_params(config_to_params(PlannerConfig())))
    assert set(_all_specs()) == fields - {"control.timing"} | {MODEL_DIR_OVERRIDE}


def test_replay_only_settings_are_no_node_parameters():
    """`control.timing` (replay's) is not declared; a params file that sets it is no typo."""
    assert not is_node_parameter("control.timing") and is_node_parameter("control.rate_hz")
    assert "control.timing" not in _all_specs()
    declared = list(_all_specs())
    assert unknown_parameters(["control.timing", "control.timming"], declared) == [
        "control.timming"
    ]


def test_choices_and_ranges_come_from_the_config_fields():
    """The tables are the config fields' own metadata, not a copy kept in ros/params.py."""
    assert CHOICES["model.dtype"] == DTYPES and CHOICES["decoding.strategy"] == STRATEGIES
    assert CHOICES["cameras.*.transport"] == ("raw", "compressed")
    assert RANGES["rollouts.num_rollouts"] == (1, 64)
    assert RANGES["pipeline.add_threshold"] == (0.0, 1.0)
    specs = _all_specs()
    for pattern, (low, high) in RANGES.items():
        assert specs[pattern].value_range == (low, high)


def test_spec_defaults_build_the_default_config():
    assert config_from_values(_defaults(_all_specs())) == PlannerConfig()


def test_shipped_params_file_maps_like_load_config(repo_root):
    path = repo_root / "params" / "planner.yaml"
    values = flatten_params(read_params_file(path))
    assert config_from_values(values) == load_config(path)


def test_ros_types_follow_the_annotations():
    specs = _all_specs()
    assert specs["control.rate_hz"].type == "double"
    assert isinstance(specs["control.rate_hz"].default, float)
    assert specs["rollouts.num_rollouts"].type == "integer"
    assert specs["cameras.names"].type == "string_array"
    assert specs["decoding.strategy"].type == "string"
    assert specs["cameras.front.transport"].type == "string"


@pytest.mark.parametrize("name", ["decoding.confidence_threshold", "rollouts.num_rollouts"])
def test_ranges_agree_with_the_config_validation(name):
    spec = _all_specs()[name]
    low, high = spec.value_range
    values = _defaults(_all_specs())
    config_from_values({**values, name: high})  # the inclusive top is valid
    mid = (low + high) / 2 if spec.type == "double" else (low + high) // 2
    config_from_values({**values, name: mid})
    above = high + (1 if spec.type == "integer" else 0.5)
    with pytest.raises(ConfigError, match=name):
        config_from_values({**values, name: above})
    below = low - (1 if spec.type == "integer" else 0.5)
    with pytest.raises(ConfigError, match=name):
        config_from_values({**values, name: below})


def test_num_frames_range_agrees_with_the_config():
    values = _defaults(_all_specs())
    low, high = _all_specs()["frame_window.num_frames"].value_range
    for ok in (low, high):
        config_from_values({**values, "frame_window.num_frames": ok})
    for bad in (low - 1, high + 1):
        with pytest.raises(ConfigError, match="frame_window.num_frames"):
            config_from_values({**values, "frame_window.num_frames": bad})


def test_choices_are_exactly_what_the_config_accepts():
    specs = _all_specs()
    values = _defaults(specs)
    for pattern, choices in CHOICES.items():
        name = pattern.replace("*", "front")
        assert specs[name].choices == choices
        assert str(list(choices)) in specs[name].additional_constraints
        for choice in choices:
            config_from_values({**values, name: choice})
        with pytest.raises(ConfigError, match=name):
            config_from_values({**values, name: "no_such_choice"})


def test_signs_are_stated_and_exactly_what_the_config_accepts():
    """`ros2 param describe control.rate_hz` says "a finite number > 0": every open bound the
    config checks is stated on the parameter, and a value just across it is refused."""
    specs = _all_specs()
    values = _defaults(specs)
    signed = {n: s for n, s in specs.items() if s.sign}
    assert {"control.rate_hz", "gates.min_accel", "trajectory.waypoint_tolerance_m"} <= set(signed)
    across = {"> 0": (0.0, 1e-3), ">= 0": (-1e-3, 0.0), "< 0": (0.0, -1e-3)}
    for name, spec in signed.items():
        assert (
            spec.type == "double" and spec.additional_constraints == f"a finite number {spec.sign}"
        )
        bad, good = across[spec.sign]
        for refused in (bad, float("nan"), float("inf") if spec.sign != "< 0" else float("-inf")):
            with pytest.raises(ConfigError, match=name):
                config_from_values({**values, name: refused})
        if name not in ("trajectory.dt", "trajectory.horizon_s"):  # dt <= horizon too
            config_from_values({**values, name: good})


def test_read_only_where_a_change_needs_a_restart():
    specs = _all_specs()
    for name in (
        "model.dir",
        "model.backend",
        "cameras.names",
        "cameras.front.topic",
        "frame_window.num_frames",
        "topics.trajectory",
        "frames.base_link",
        MODEL_DIR_OVERRIDE,
    ):
        assert specs[name].read_only, name
    for name in ("control.rate_hz", "decoding.strategy", "gates.max_speed", "fallback.policy"):
        assert not specs[name].read_only, name


def test_descriptions_name_the_parameter():
    for name, spec in _all_specs().items():
        assert spec.description.startswith(f"{name}: "), name


def test_model_dir_override_replaces_model_dir_when_set():
    values = _defaults(_all_specs())
    assert config_from_values(values).model.dir == PlannerConfig().model.dir
    assert config_from_values({**values, MODEL_DIR_OVERRIDE: "/opt/m"}).model.dir == "/opt/m"


def test_camera_specs_follow_the_names_and_reject_bad_ones():
    specs = camera_parameter_specs(["left", "right"])
    assert {s.name: s.default for s in specs} == {
        "cameras.left.topic": "/camera/left/image_raw",
        "cameras.left.transport": "raw",
        "cameras.right.topic": "/camera/right/image_raw",
        "cameras.right.transport": "raw",
    }
    with pytest.raises(ConfigError, match="cameras.name"):
        camera_parameter_specs(["front camera"])


def test_values_from_rclpy_containers_and_node_level_parameters():
    values = {
        **_defaults(_all_specs(["cam"])),
        "cameras.names": ("cam",),  # rclpy may hand arrays back as tuples
        "use_sim_time": True,
        "qos_overrides./odom.subscription.depth": 5,
    }
    config = config_from_values(values)
    assert config.camera_names == ("cam",)


def test_bad_value_names_the_parameter():
    values = _defaults(_all_specs())
    with pytest.raises(ConfigError, match="control.rate_hz"):
        config_from_values({**values, "control.rate_hz": -1.0})
    with pytest.raises(ConfigError, match="trajectory.dt"):
        config_from_values({**values, "trajectory.dt": 6.0})


def test_unknown_parameters_catch_typos_but_not_node_parameters():
    declared = list(_all_specs())
    given = ["control.rate_hz", "contrl.rate_hz", "use_sim_time", "qos_overrides./x.depth"]
    assert unknown_parameters(given, declared) == ["contrl.rate_hz"]


def test_topics_are_namespace_relative_and_compressed_uses_image_transport():
    config = PlannerConfig()
    assert node_topic(config.topics.trajectory) == "planning/trajectory"
    raw = config.cameras[0]
    assert camera_subscription(raw) == (
        f"camera/{raw.name}/image_raw",
        "sensor_msgs/msg/Image",
    )
    values = {**_defaults(_all_specs()), "cameras.front.transport": "compressed"}
    compressed = config_from_values(values).cameras[1]
    assert camera_subscription(compressed) == (
        "camera/front/image_raw/compressed",
        "sensor_msgs/msg/CompressedImage",
    )
    values["cameras.front.topic"] = "/cam/front/compressed"
    compressed = config_from_values(values).cameras[1]
    assert camera_subscription(compressed)[0] == "cam/front/compressed"


def test_parameter_specs_of_a_custom_config_use_its_values():
    values = {**_defaults(_all_specs()), "control.rate_hz": 20.0}
    specs = {s.name: s for s in parameter_specs(config_from_values(values))}
    assert specs["control.rate_hz"].default == 20.0
