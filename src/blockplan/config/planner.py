"""`PlannerConfig`, the whole tree, and its mapping to and from a nested `ros__parameters`
dict (an unknown key is an error naming it).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from blockplan.config.cameras import (
    DEFAULT_CAMERA_TOPIC,
    CameraConfig,
    FrameWindowConfig,
    _default_cameras,
)
from blockplan.config.control import ControlConfig, FallbackConfig
from blockplan.config.decoding import DecodingConfig, FlowConfig, PipelineConfig, RolloutConfig
from blockplan.config.fields import _check, shown
from blockplan.config.model import ModelConfig
from blockplan.config.robot import RobotConfig
from blockplan.config.topics import FramesConfig, TopicsConfig
from blockplan.config.trajectory import (
    ComfortConfig,
    GateConfig,
    LaneGuardConfig,
    TrajectoryOutputConfig,
)
from blockplan.errors import ConfigError
from blockplan.params_file import flatten_params, unflatten_params


@dataclass(frozen=True)
class PlannerConfig:
    """The whole planner configuration."""

    model: ModelConfig = field(default_factory=ModelConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    rollouts: RolloutConfig = field(default_factory=RolloutConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    cameras: tuple[CameraConfig, ...] = field(default_factory=_default_cameras)
    frame_window: FrameWindowConfig = field(default_factory=FrameWindowConfig)
    trajectory: TrajectoryOutputConfig = field(default_factory=TrajectoryOutputConfig)
    gates: GateConfig = field(default_factory=GateConfig)
    comfort: ComfortConfig = field(default_factory=ComfortConfig)
    lane_guard: LaneGuardConfig = field(default_factory=LaneGuardConfig)
    fallback: FallbackConfig = field(default_factory=FallbackConfig)
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    frames: FramesConfig = field(default_factory=FramesConfig)
    robot: RobotConfig = field(default_factory=RobotConfig)

    def __post_init__(self) -> None:
        _check(len(self.cameras) >= 1, "cameras.names", [], "at least one camera is required")
        names = [c.name for c in self.cameras]
        _check(len(set(names)) == len(names), "cameras.names", names, "names must be unique")
        topics = [c.topic for c in self.cameras]
        _check(len(set(topics)) == len(topics), "cameras.topic", topics, "topics must be unique")

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    def with_params(self, params: Mapping[str, Any]) -> PlannerConfig:
        """A copy with some parameters replaced, by their dotted ROS names
        (`{"model.dtype": "float64", "control.rate_hz": 5.0}`), validated like a params file:
        an unknown name or a bad value is a `ConfigError` naming it."""
        flat = flatten_params(config_to_params(self))
        flat.update(params)
        return config_from_params(unflatten_params(flat))


def _coerce(where: str, value: Any, hint: Any) -> Any:
    """Check a scalar against its annotation; ints are accepted where floats are expected."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(where, value, args[0])
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}={shown(value)}: must be a number")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}={shown(value)}: must be an integer")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={shown(value)}: must be true or false")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}={shown(value)}: must be a string")
        return value
    if hint == tuple[int, ...]:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={shown(value)}: must be a list of integers")
        return tuple(_coerce(f"{where}[{i}]", v, int) for i, v in enumerate(value))
    raise TypeError(f"{where}: unsupported annotation {hint!r}")  # a bug in this module


def _build(cls: type, params: Mapping[str, Any], prefix: str) -> Any:
    if not isinstance(params, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or '<root>'}={shown(params)}: must be a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(f"unknown parameter '{prefix}{unknown[0]}' (known: {sorted(names)})")
    kwargs: dict[str, Any] = {}
    for name, value in params.items():
        where = f"{prefix}{name}"
        hint = hints[name]
        if cls is PlannerConfig and name == "cameras":
            kwargs[name] = _build_cameras(value)
        elif dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value, f"{where}.")
        else:
            kwargs[name] = _coerce(where, value, hint)
    return cls(**kwargs)


def _build_cameras(params: Mapping[str, Any]) -> tuple[CameraConfig, ...]:
    if not isinstance(params, Mapping) or "names" not in params:
        raise ConfigError(f"cameras={shown(params)}: must be a mapping with a 'names' list")
    names = params["names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"cameras.names={shown(names)}: must be a list of strings")
    unknown = sorted(set(params) - {"names", *names})
    if unknown:
        raise ConfigError(f"unknown parameter 'cameras.{unknown[0]}': not listed in cameras.names")
    cameras = []
    for name in names:
        sub = params.get(name) or {}
        if not isinstance(sub, Mapping):
            raise ConfigError(
                f"cameras.{name}={shown(sub)}: must be a mapping of topic and transport"
            )
        sub = dict(sub)
        sub.setdefault("topic", DEFAULT_CAMERA_TOPIC.format(name=name))
        cameras.append(_build(CameraConfig, {"name": name, **sub}, f"cameras.{name}."))
    return tuple(cameras)


def config_from_params(params: Mapping[str, Any]) -> PlannerConfig:
    """Build a validated `PlannerConfig` from a nested `ros__parameters` mapping.

    Missing keys keep their defaults; unknown keys raise `ConfigError` naming the key.
    """
    return _build(PlannerConfig, params, "")


def config_to_params(config: PlannerConfig) -> dict[str, Any]:
    """The inverse of `config_from_params`: a nested mapping of ROS-representable values."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.name == "cameras":
            out["cameras"] = {"names": [c.name for c in value]}
            for cam in value:
                out["cameras"][cam.name] = {"topic": cam.topic, "transport": cam.transport}
        else:  # tuples (flow.evaluate_steps) as lists, like a params file writes them
            out[f.name] = {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(value).items()
            }
    return out
