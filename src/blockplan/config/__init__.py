"""The planner configuration: one frozen dataclass tree and one loader.

The ROS node, the CLI, replay and tests all read `params/planner.yaml`, a ROS 2 parameter
file (`<node_name>: {ros__parameters: {...}}`). Keys nest as in ROS 2 (`decoding.strategy`
is `decoding: {strategy: ...}`), so the same file can be handed to `ros2 run --params-file`.
Only ROS-representable values are used (scalars and lists of scalars); cameras are listed by
name in `cameras.names` with one sub-table per camera.

Every class validates itself in `__post_init__` and raises `ConfigError` naming the field
and the bad value; an unknown key is an error naming the key.

One module per area: `fields` (field metadata and checks), `model`, `decoding`, `control`,
`cameras`, `trajectory`, `topics`, `robot`, `planner` (the whole tree and its params mapping)
and `loading` (params files, `--set` overrides). Every name is importable from
`blockplan.config`.
"""

from blockplan.config.cameras import (
    DEFAULT_CAMERA_TOPIC,
    STALE_CAMERA_POLICIES,
    STREAMING_MODES,
    TRANSPORTS,
    CameraConfig,
    FrameWindowConfig,
)
from blockplan.config.control import FALLBACK_POLICIES, TIMING_MODES, ControlConfig, FallbackConfig
from blockplan.config.decoding import (
    DRAFTER_STRATEGIES,
    MODEL_STRATEGIES,
    ROLLOUT_DECODINGS,
    SPEC_WINDOWS,
    STRATEGIES,
    DecodingConfig,
    FlowConfig,
    PipelineConfig,
    RolloutConfig,
)
from blockplan.config.fields import (
    CHOICES_KEY,
    NODE_KEY,
    RANGE_KEY,
    SIGN_KEY,
    SIGNS,
    bounded,
    choice,
    signed,
)
from blockplan.config.loading import (
    DEFAULT_NODE_NAME,
    add_set_argument,
    default_params_path,
    dump_config,
    load_config,
    package_root,
    parse_override,
    with_overrides,
)
from blockplan.config.model import BACKENDS, DTYPES, EMBODIMENTS, ModelConfig
from blockplan.config.planner import PlannerConfig, config_from_params, config_to_params
from blockplan.config.robot import SAWYER_JOINTS, RobotConfig
from blockplan.config.topics import FramesConfig, TopicsConfig
from blockplan.config.trajectory import (
    ComfortConfig,
    GateConfig,
    LaneGuardConfig,
    TrajectoryOutputConfig,
)
from blockplan.errors import ConfigError
from blockplan.params_file import flatten_params, load_yaml, read_params_file, unflatten_params

__all__ = [
    "BACKENDS",
    "CHOICES_KEY",
    "CameraConfig",
    "ComfortConfig",
    "ConfigError",
    "ControlConfig",
    "DEFAULT_CAMERA_TOPIC",
    "DEFAULT_NODE_NAME",
    "DTYPES",
    "DecodingConfig",
    "EMBODIMENTS",
    "FALLBACK_POLICIES",
    "FallbackConfig",
    "FlowConfig",
    "FrameWindowConfig",
    "FramesConfig",
    "GateConfig",
    "LaneGuardConfig",
    "ModelConfig",
    "NODE_KEY",
    "PipelineConfig",
    "PlannerConfig",
    "RANGE_KEY",
    "ROLLOUT_DECODINGS",
    "RobotConfig",
    "RolloutConfig",
    "SAWYER_JOINTS",
    "SIGNS",
    "SIGN_KEY",
    "SPEC_WINDOWS",
    "STALE_CAMERA_POLICIES",
    "STRATEGIES",
    "DRAFTER_STRATEGIES",
    "MODEL_STRATEGIES",
    "STREAMING_MODES",
    "TIMING_MODES",
    "TRANSPORTS",
    "TopicsConfig",
    "TrajectoryOutputConfig",
    "add_set_argument",
    "bounded",
    "choice",
    "config_from_params",
    "config_to_params",
    "default_params_path",
    "dump_config",
    "flatten_params",
    "load_config",
    "load_yaml",
    "package_root",
    "parse_override",
    "read_params_file",
    "signed",
    "unflatten_params",
    "with_overrides",
]
