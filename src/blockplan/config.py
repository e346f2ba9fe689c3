"""The planner configuration: one frozen dataclass tree and one loader.

The ROS node, the CLI, replay and tests all read `params/planner.yaml`, a ROS 2 parameter
file (`<node_name>: {ros__parameters: {...}}`). Keys nest as in ROS 2 (`decoding.strategy`
is `decoding: {strategy: ...}`), so the same file can be handed to `ros2 run --params-file`.
Only ROS-representable values are used (scalars and lists of scalars); cameras are listed by
name in `cameras.names` with one sub-table per camera.

Every class validates itself in `__post_init__` and raises `ConfigError` naming the field
and the bad value; an unknown key is an error naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from blockplan.errors import ConfigError
from blockplan.params_file import (
    PLANNER_NODE_NAME,
    flatten_params,
    load_yaml,
    read_params_file,
    unflatten_params,
)

BACKENDS = ("auto", "torch", "onnxruntime", "tensorrt")
SPEC_WINDOWS = ("adaptive", "block")
ROLLOUT_DECODINGS = ("scaffold_spec", "ar")
STRATEGIES = (
    "ar",
    "full_diffusion",
    "section_diffusion",
    "scaffold_spec",
    "rollouts",
    "pipelined",
    "dflash",
)
# strategies that need more than the model folder (dflash: a drafter folder, the torch backend)
DRAFTER_STRATEGIES = ("dflash",)
MODEL_STRATEGIES = tuple(s for s in STRATEGIES if s not in DRAFTER_STRATEGIES)
EMBODIMENTS = ("vehicle", "robot")  # docs/DESIGN.md §1
TRANSPORTS = ("raw", "compressed")
STREAMING_MODES = ("auto", "on", "off")
STALE_CAMERA_POLICIES = ("wait", "degrade", "fallback")
FALLBACK_POLICIES = ("stop", "hold_last")
TIMING_MODES = ("ideal", "measured")
DTYPES = ("float32", "float64", "float16", "bfloat16")
DEFAULT_NODE_NAME = PLANNER_NODE_NAME
DEFAULT_CAMERA_TOPIC = "/camera/{name}/image_raw"  # .format(name=...): a camera's default topic


def _check(ok: bool, where: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"{where}={value!r}: {why}")


def _one_of(where: str, value: str, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, where, value, f"must be one of {list(allowed)}")


# Field metadata, read by the validation here and by the node's parameters (ros/params.py):
# the values a field allows, the ROS range of a bounded one and the sign of a signed one come
# from the field itself.
CHOICES_KEY, RANGE_KEY, NODE_KEY, SIGN_KEY = "choices", "range", "node_parameter", "sign"
SIGNS = {"> 0": lambda v: v > 0, ">= 0": lambda v: v >= 0, "< 0": lambda v: v < 0}


def choice(default: str, choices: tuple[str, ...], node_parameter: bool = True) -> Any:
    """A string field that must be one of `choices` (`_check_choices`; the node's parameter
    lists them). `node_parameter=False`: a setting of the params file that the node neither
    declares nor uses (replay's `control.timing`)."""
    metadata = {CHOICES_KEY: choices, NODE_KEY: node_parameter}
    return field(default=default, metadata=metadata)


def bounded(default: float, low: float, high: float) -> Any:
    """A number within [low, high]: the node's parameter range (ROS ranges are inclusive). The
    class's `__post_init__` checks the exact bounds (an open end, e.g. a threshold > 0)."""
    return field(default=default, metadata={RANGE_KEY: (low, high)})


def signed(default: float, sign: str) -> Any:
    """A finite number with `sign` (a key of `SIGNS`, e.g. "> 0"): `_check_fields` checks it
    and the node's parameter states it (`ros2 param describe`)."""
    if sign not in SIGNS:
        raise ValueError(f"sign {sign!r}: one of {list(SIGNS)}")
    return field(default=default, metadata={SIGN_KEY: sign})


def _check_fields(obj: Any, where: str) -> None:
    """Every `choice` field of the dataclass `obj` holds one of its choices and every `signed`
    field a finite number of its sign (errors name `where.field`)."""
    for f in dataclasses.fields(obj):
        name, value = f"{where}.{f.name}", getattr(obj, f.name)
        if CHOICES_KEY in f.metadata:
            _one_of(name, value, f.metadata[CHOICES_KEY])
        if SIGN_KEY in f.metadata:
            sign = f.metadata[SIGN_KEY]
            ok = math.isfinite(value) and SIGNS[sign](value)
            _check(ok, name, value, f"must be a finite number {sign}")


@dataclass(frozen=True)
class ModelConfig:
    """Which model runs, on which backend. `dir` is relative to the params file's package
    share (or absolute)."""

    dir: str = "models/blockplan-tiny"
    # "auto": onnxruntime for a float32 model on the CPU where it is installed (measured
    # faster there, docs/BENCHMARKS.md), torch otherwise (a GPU, Qwen2.5-VL folders, other
    # dtypes); tensorrt is only ever chosen by name
    backend: str = choice("auto", BACKENDS)
    dtype: str = choice("float32", DTYPES)
    num_threads: int = 1
    device: str = "cpu"  # torch backend: cpu, cuda or cuda:N (model, K/V cache, images)
    # What the model drives: `vehicle` (the driving schema) or `robot` (action chunks); it
    # must match the model folder's `embodiment` (docs/DESIGN.md §1).
    embodiment: str = choice("vehicle", EMBODIMENTS)
    # Torch backend on a CUDA device: decode forwards in static (batch, window) buckets
    # replayed as CUDA graphs, eager outside them (backends/graphs.py, docs/DECODING.md).
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        _check(bool(self.dir), "model.dir", self.dir, "must not be empty")
        _check_fields(self, "model")
        _check(self.num_threads >= 1, "model.num_threads", self.num_threads, "must be >= 1")
        _check(
            re.fullmatch(r"cpu|cuda(:\d+)?", self.device) is not None,
            "model.device",
            self.device,
            "must be cpu, cuda or cuda:N",
        )
        _check(
            self.device == "cpu" or self.backend in ("torch", "auto"),
            "model.device",
            self.device,
            f"applies to the torch backend only ({self.backend} places itself)",
        )
        _check(
            not self.cuda_graphs or (self.backend in ("torch", "auto") and self.device != "cpu"),
            "model.cuda_graphs",
            self.cuda_graphs,
            "needs model.backend=torch and model.device=cuda or cuda:N (CUDA graphs record "
            f"GPU kernels; backend={self.backend}, device={self.device}: set it false)",
        )


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding strategy and its knobs (docs/ALGORITHMS.md §4)."""

    strategy: str = choice("scaffold_spec", STRATEGIES)
    confidence_threshold: float = bounded(0.9, 0.0, 1.0)
    max_denoise_steps: int = 64
    # scaffold_spec / rollouts: the previous plan's answer is each block's first draft (no
    # draft forward); fewer forwards when consecutive answers agree, the same tokens
    draft_from_previous: bool = True
    # scaffold_spec / rollouts: the free-text section (the explanation) is drafted from the
    # model folder's answer n-gram table (draft_ngrams.json) where it has one, instead of a
    # draft forward; the same tokens, fewer forwards
    ngram_drafts: bool = True
    # scaffold spec's verify windows: "adaptive" (a block's first window is the whole block;
    # after a rejection the next covers at most twice the editable slots the last one
    # decided) or "block" (always the rest of the block). Only the forwards change.
    spec_window: str = choice("adaptive", SPEC_WINDOWS)
    # dflash: the drafter folder (blockplan train-drafter; config.json, model.safetensors and
    # a manifest, made for this model's decoder weights); "" none
    drafter: str = ""

    def __post_init__(self) -> None:
        _check_fields(self, "decoding")
        _check(
            0.0 < self.confidence_threshold <= 1.0,
            "decoding.confidence_threshold",
            self.confidence_threshold,
            "must be in (0, 1]",
        )
        _check(
            self.max_denoise_steps >= 1,
            "decoding.max_denoise_steps",
            self.max_denoise_steps,
            "must be >= 1",
        )


@dataclass(frozen=True)
class RolloutConfig:
    """Shared-prefix test-time scaling: N trajectory rollouts sampled at `temperature`.

    `max_deviation_m`: before averaging, a rollout is dropped when one of its waypoints lies
    farther than this from the waypoint-wise median of the N rollouts (one wrong leading digit
    of a fixed-width number moves a waypoint by 10 m or more); 0 keeps every rollout. At least
    the median-closest rollout is always kept."""

    num_rollouts: int = bounded(4, 1, 64)
    temperature: float = signed(0.5, ">= 0")
    seed: int = 0
    max_deviation_m: float = signed(5.0, ">= 0")
    # How the N forked rows decode the trajectory: "scaffold_spec" (drafts coupled to the
    # verify's uniforms; the faster on real sequences, where the model is sure and drafts
    # run long) or "ar" (one token per forward for all N rows: faster where drafts are short,
    # e.g. an unsure model on a CPU, where every row of a window costs). The same tokens.
    trajectory_decoding: str = choice("scaffold_spec", ROLLOUT_DECODINGS)

    def __post_init__(self) -> None:
        _check_fields(self, "rollouts")
        _check(
            1 <= self.num_rollouts <= 64,
            "rollouts.num_rollouts",
            self.num_rollouts,
            "must be in [1, 64]",
        )


@dataclass(frozen=True)
class PipelineConfig:
    """Pipelined block decoding (docs/ALGORITHMS.md §8): a block joins the active set
    semi-activated once its predecessor's completion ratio reaches `add_threshold` (it then
    commits only tokens whose confidence exceeds `semi_confidence`) and is fully activated
    once the predecessor reaches `activate_threshold` (it also commits at least
    ceil(remaining / `commit_divisor`) of its unknown tokens per step, by confidence). The
    first block whose predecessors are complete decodes as in section diffusion. With
    add_threshold = 1 the pipeline is serial block diffusion."""

    add_threshold: float = bounded(0.3, 0.0, 1.0)
    activate_threshold: float = bounded(0.7, 0.0, 1.0)
    semi_confidence: float = bounded(0.5, 0.0, 1.0)
    commit_divisor: int = 3

    def __post_init__(self) -> None:
        _check(
            0.0 <= self.add_threshold <= 1.0,
            "pipeline.add_threshold",
            self.add_threshold,
            "must be in [0, 1]",
        )
        _check(
            self.add_threshold <= self.activate_threshold <= 1.0,
            "pipeline.activate_threshold",
            self.activate_threshold,
            f"must be in [add_threshold, 1] = [{self.add_threshold}, 1]",
        )
        _check(
            0.0 < self.semi_confidence <= 1.0,
            "pipeline.semi_confidence",
            self.semi_confidence,
            "must be in (0, 1]",
        )
        _check(
            self.commit_divisor >= 1,
            "pipeline.commit_divisor",
            self.commit_divisor,
            "must be >= 1",
        )


@dataclass(frozen=True)
class FlowConfig:
    """The flow-matching trajectory head (models with `trajectory_head: flow`,
    docs/ALGORITHMS.md §7.1): `num_steps` Euler steps from Gaussian noise; the head runs
    at `evaluate_steps` (1-based, must include 1) and every other step reuses the last
    computed velocity (adaptive step caching); an empty list evaluates every step.
    Token-head models ignore this section."""

    num_steps: int = 8
    evaluate_steps: tuple[int, ...] = (1, 2, 7, 8)

    def __post_init__(self) -> None:
        _check(1 <= self.num_steps <= 256, "flow.num_steps", self.num_steps, "must be in [1, 256]")
        steps = self.evaluate_steps
        _check(
            all(isinstance(k, int) and not isinstance(k, bool) for k in steps),
            "flow.evaluate_steps",
            list(steps),
            "must be a list of integers",
        )
        _check(
            not steps or (1 in steps and all(1 <= k <= self.num_steps for k in steps)),
            "flow.evaluate_steps",
            list(steps),
            f"must include step 1 and lie in [1, num_steps={self.num_steps}] (empty: all)",
        )
        _check(
            len(set(steps)) == len(steps),
            "flow.evaluate_steps",
            list(steps),
            "must not repeat a step",
        )


@dataclass(frozen=True)
class ControlConfig:
    """The fixed-rate control loop (docs/DESIGN.md §5)."""

    rate_hz: float = signed(10.0, "> 0")
    max_plan_age_s: float = signed(1.0, "> 0")
    # When a replayed plan becomes available (blockplan replay; the live node runs in real
    # time and has no such setting).
    timing: str = choice("ideal", TIMING_MODES, node_parameter=False)

    def __post_init__(self) -> None:
        _check_fields(self, "control")


@dataclass(frozen=True)
class CameraConfig:
    """One camera: its name (also the frame id suffix), topic and transport."""

    name: str
    topic: str
    transport: str = choice("raw", TRANSPORTS)

    def __post_init__(self) -> None:
        _check(
            bool(self.name) and self.name.replace("_", "").isalnum(),
            "cameras.name",
            self.name,
            "must be a non-empty identifier (letters, digits, _)",
        )
        _check(
            self.topic.startswith("/"), f"cameras.{self.name}.topic", self.topic, "must be absolute"
        )
        _check_fields(self, f"cameras.{self.name}")


def _default_cameras() -> tuple[CameraConfig, ...]:
    names = ("front_left", "front", "front_right", "rear")
    return tuple(CameraConfig(name=n, topic=DEFAULT_CAMERA_TOPIC.format(name=n)) for n in names)


@dataclass(frozen=True)
class FrameWindowConfig:
    """The sliding frame window: T frames per camera, `frame_period_s` apart. With
    `reuse_tolerance` > 0 a window's older frame is, among the frames within that fraction of
    the period of its target time, one an earlier request already used (streaming reuses
    its K/V)."""

    num_frames: int = bounded(2, 1, 16)
    frame_period_s: float = signed(0.5, "> 0")
    max_frame_age_s: float = signed(0.3, "> 0")
    stale_camera_policy: str = choice("degrade", STALE_CAMERA_POLICIES)
    # Streaming prefill (DECODING.md "Streaming"): "auto" = on for models whose frames stream
    # exactly (frame-only visual attention, no frame-slot embedding), off for the others;
    # "on" also streams the others (approximate, opt-in); "off" recomputes every tick.
    streaming: str = choice("auto", STREAMING_MODES)
    # RUNTIME.md "Windows that share frames": a fraction of frame_period_s (0.25: 0.125 s at
    # 0.5 s); 0 picks the frame nearest each target time.
    reuse_tolerance: float = 0.25

    def __post_init__(self) -> None:
        _check(
            1 <= self.num_frames <= 16,
            "frame_window.num_frames",
            self.num_frames,
            "must be in [1, 16]",
        )
        _check_fields(self, "frame_window")
        _check(
            0.0 <= self.reuse_tolerance < 0.5,
            "frame_window.reuse_tolerance",
            self.reuse_tolerance,
            "must be in [0, 0.5) (a fraction of frame_period_s)",
        )


@dataclass(frozen=True)
class TrajectoryOutputConfig:
    """The published trajectory: the jerk-minimizing fit of the waypoints within
    `waypoint_tolerance_m` (0: the WOD-E2E JMT interpolation, exactly through them), sampled
    at `dt` over `horizon_s`, stitched onto the commanded state over `stitch_duration_s`."""

    dt: float = signed(0.25, "> 0")
    horizon_s: float = signed(5.0, "> 0")
    stitch_duration_s: float = 0.5
    # A waypoint's distance from the published path may be up to this (m): ±0.5 m of waypoint
    # noise on a 20 m/s cruise then gives ~6 m/s³ of jerk at most, not ~20 (trajectory/smooth.py);
    # 0.2 m and more let a car tracking the expert's roundabout path leave the lane
    # (docs/RUNTIME.md "The published path").
    waypoint_tolerance_m: float = signed(0.15, ">= 0")

    def __post_init__(self) -> None:
        _check_fields(self, "trajectory")
        _check(
            self.dt <= self.horizon_s, "trajectory.dt", self.dt, "must be <= trajectory.horizon_s"
        )
        _check(
            0.0 <= self.stitch_duration_s < self.horizon_s,
            "trajectory.stitch_duration_s",
            self.stitch_duration_s,
            "must be in [0, horizon_s)",
        )


@dataclass(frozen=True)
class GateConfig:
    """Hard feasibility limits on a plan's published trajectory: beyond any of them the plan
    is rejected and the fallback published. Set for what a car cannot do (or a decoding
    error, e.g. a wrong leading digit, makes it do), calibrated so that the simulator
    expert's own futures pass in >= 99 % of the test samples of every scenario
    (docs/BENCHMARKS.md "Validity gates")."""

    max_speed: float = signed(40.0, "> 0")
    min_accel: float = signed(-8.0, "< 0")  # ≈ 0.8 g: emergency braking on dry asphalt
    max_accel: float = signed(8.0, "> 0")
    max_lateral_accel: float = signed(10.0, "> 0")  # ≈ 1 g: no tyre holds more
    max_abs_jerk: float = signed(50.0, "> 0")
    max_yaw_rate: float = signed(2.0, "> 0")
    # Below this speed (m/s) the yaw rate is not checked: a path's heading at a standstill is
    # fit noise (the fit's curvature at 0.6 m/s), harmless at that speed (lateral
    # acceleration = speed · yaw rate, checked everywhere).
    yaw_rate_min_speed: float = signed(3.0, ">= 0")

    def __post_init__(self) -> None:
        _check_fields(self, "gates")


@dataclass(frozen=True)
class LaneGuardConfig:
    """A check of each rollout against the lanes beside (/perception/lanes_beside: the
    map's lane counts, the tracker's cars beside), where a report is at hand: a rollout that
    moves more than `change_m` sideways out of the ego's lane (its lateral offset in the
    lane frame at t0, from the lane pose when known) towards a side with no lane, or with a
    car beside nearer than `clear_ahead_m` ahead or `clear_behind_m` behind, is dropped
    from the average; a plan left with none is rejected like one that fails the gates.
    The check only applies where the road is straight: the ego's yaw changed by at most
    `straight_yaw_rad` over the last second and the rollout turns by at most `max_turn_rad`
    (in a curve the lines beside are elsewhere, and a lane count says nothing of it). Calibrated so that the
    simulator expert's own futures pass in >= 99.8 % of the samples of every scenario
    (docs/BENCHMARKS.md "The lanes beside")."""

    # Off by default: in closed loop it made the shipped greedy planner worse (a rejected
    # lane change leaves the fallback holding a stale plan; docs/BENCHMARKS.md).
    enabled: bool = False
    change_m: float = signed(2.0, "> 0")  # half a 4 m lane: the ego's centre crosses the line
    clear_ahead_m: float = signed(5.0, ">= 0")
    clear_behind_m: float = signed(5.0, ">= 0")
    max_turn_rad: float = signed(0.1, ">= 0")  # a lane change at speed turns by < 0.1 rad
    straight_yaw_rad: float = signed(0.02, ">= 0")

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), "lane_guard.enabled", self.enabled, "must be a bool")
        _check_fields(self, "lane_guard")


@dataclass(frozen=True)
class ComfortConfig:
    """Comfort limits (Alpamayo's, docs/ALGORITHMS.md §9): a plan beyond them is still published;
    the excess is counted (`uncomfortable_plans`) and reported on /diagnostics and in the
    metrics. Same checks as the hard `gates`."""

    max_speed: float = signed(40.0, "> 0")
    min_accel: float = signed(-4.05, "< 0")
    max_accel: float = signed(2.40, "> 0")
    max_lateral_accel: float = signed(4.89, "> 0")
    max_abs_jerk: float = signed(8.37, "> 0")
    max_yaw_rate: float = signed(0.95, "> 0")
    yaw_rate_min_speed: float = signed(0.0, ">= 0")  # m/s: the yaw rate is checked at every speed

    def __post_init__(self) -> None:
        _check_fields(self, "comfort")


@dataclass(frozen=True)
class FallbackConfig:
    """What is published when there is no fresh valid plan."""

    policy: str = choice("hold_last", FALLBACK_POLICIES)
    stop_deceleration: float = signed(2.0, "> 0")
    max_hold_age_s: float = signed(1.5, "> 0")

    def __post_init__(self) -> None:
        _check_fields(self, "fallback")


@dataclass(frozen=True)
class TopicsConfig:
    """Topic names (docs/DESIGN.md §4); all remappable."""

    odom: str = "/odom"
    route_command: str = "/planning/route_command"
    # geometry_msgs/PoseStamped in the lane frame: the ego's offset from its lane centre
    # (position.y) and heading error (yaw), from the localisation; read by models whose ego
    # encoder takes the lane pose (model/ego.py), ignored by the others.
    lane_pose: str = "/localization/lane_pose"
    # nav_msgs/Odometry of the car ahead in the ego's lane, in base_link: the gap
    # (pose.position.x, infinite when none) and its speed (twist.linear.x), from a tracker or
    # an ACC radar; read by models whose ego encoder takes it (model/ego.py).
    lead_vehicle: str = "/perception/lead_vehicle"
    # std_msgs/Float64MultiArray of the lanes beside the ego's, per side (left, right): the
    # lane count from the map, then the gap to the nearest car ahead and behind in the lane
    # line beside and their speeds, from a tracker (bags/beside.py); read by models whose
    # ego encoder takes it (model/ego.py).
    lanes_beside: str = "/perception/lanes_beside"
    trajectory: str = "/planning/trajectory"
    rollouts: str = "/planning/rollouts"
    reasoning: str = "/planning/reasoning"
    diagnostics: str = "/diagnostics"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            _check(
                value.startswith("/"), f"topics.{f.name}", value, "must be an absolute topic name"
            )


@dataclass(frozen=True)
class FramesConfig:
    """TF frame ids: plans are expressed in `base_link` at t0."""

    base_link: str = "base_link"
    odom: str = "odom"

    def __post_init__(self) -> None:
        _check(bool(self.base_link), "frames.base_link", self.base_link, "must not be empty")
        _check(bool(self.odom), "frames.odom", self.odom, "must not be empty")


SAWYER_JOINTS = "right_j0,right_j1,right_j2,right_j3,right_j4,right_j5,right_j6,r_close,l_close"


@dataclass(frozen=True)
class RobotConfig:
    """The robot embodiment's runtime and node (`model.embodiment: robot`; docs/RUNTIME.md
    "Robots"). A chunk's step k applies at its observation's stamp + k·chunk_period_s; each
    control tick publishes the step of the newest chunk that matches the tick's time (chunk
    stitching), a new chunk is requested once `replan_steps` steps of the newest have
    started (receding horizon), and without a usable chunk the command holds position (zero
    velocity, the gripper as last commanded)."""

    joint_names: str = SAWYER_JOINTS  # comma-separated: the proprioceptive state's order
    instruction: str = ""  # used until the instruction topic has a message
    chunk_period_s: float = signed(0.0125, "> 0")  # the data set's control period
    replan_steps: int = 2
    # > 0: each step's action is the weighted mean over every recent chunk that covers it,
    # weight exp(-m·i) with i = 0 the oldest (ACT's temporal ensembling); 0: the newest only
    temporal_ensemble: float = signed(0.0, ">= 0")
    max_joint_state_age_s: float = signed(0.2, "> 0")
    # m/s end-effector velocity per action unit (Meta-World)
    velocity_per_unit: float = signed(0.8, "> 0")
    command_frame: str = "world"
    joint_states_topic: str = "/joint_states"
    instruction_topic: str = "/instruction"
    twist_topic: str = "/servo_node/delta_twist_cmds"
    gripper_topic: str = "/gripper/command"
    chunk_topic: str = "/planning/action_chunk"

    def __post_init__(self) -> None:
        names = self.joint_name_list
        _check(bool(names) and all(names), "robot.joint_names", self.joint_names,
               "must be a comma-separated list of joint names")  # fmt: skip
        _check(len(set(names)) == len(names), "robot.joint_names", self.joint_names,
               "names must be unique")  # fmt: skip
        _check(self.replan_steps >= 1, "robot.replan_steps", self.replan_steps, "must be >= 1")
        _check_fields(self, "robot")
        for name in ("joint_states", "instruction", "twist", "gripper", "chunk"):
            value = getattr(self, f"{name}_topic")
            _check(value.startswith("/"), f"robot.{name}_topic", value, "must be absolute")

    @property
    def joint_name_list(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.joint_names.split(","))


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


# --------------------------------------------------------------------------------------------
# Mapping between the nested parameter dict and the dataclass tree.


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
            raise ConfigError(f"{where}={value!r}: must be a number")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}={value!r}: must be an integer")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r}: must be true or false")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}={value!r}: must be a string")
        return value
    if hint == tuple[int, ...]:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r}: must be a list of integers")
        return tuple(_coerce(f"{where}[{i}]", v, int) for i, v in enumerate(value))
    raise TypeError(f"{where}: unsupported annotation {hint!r}")  # a bug in this module


def _build(cls: type, params: Mapping[str, Any], prefix: str) -> Any:
    if not isinstance(params, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or '<root>'}={params!r}: must be a mapping")
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
        raise ConfigError(f"cameras={params!r}: must be a mapping with a 'names' list")
    names = params["names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"cameras.names={names!r}: must be a list of strings")
    unknown = sorted(set(params) - {"names", *names})
    if unknown:
        raise ConfigError(f"unknown parameter 'cameras.{unknown[0]}': not listed in cameras.names")
    cameras = []
    for name in names:
        sub = dict(params.get(name) or {})
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


def load_config(
    path: str | Path, node_name: str | None = None, overrides: Sequence[str] = ()
) -> PlannerConfig:
    """Load and validate the planner configuration from a ROS 2 params YAML file, with
    `NAME=VALUE` overrides (dotted name, YAML value; the CLIs' `--set`) applied first."""
    params = read_params_file(path, node_name)
    try:
        if overrides:
            flat = flatten_params(params)
            flat.update(parse_override(item) for item in overrides)
            params = unflatten_params(flat)
        return config_from_params(params)
    except ConfigError as e:
        if str(e).startswith("--set "):
            raise  # parse_override's own error names its item
        culprit = _override_at_fault(overrides, str(e))
        if culprit is not None:
            raise ConfigError(f"--set {culprit!r}: {e}") from e
        raise ConfigError(f"{path}: {e}") from e


def parse_override(item: str) -> tuple[str, Any]:
    """One `--set NAME=VALUE`: the dotted name and its YAML value."""
    name, sep, text = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
    try:
        value = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item!r}: {e}") from e
    if isinstance(value, bool) and text.strip().lower() not in ("true", "false"):
        value = text.strip()  # YAML 1.1 reads on / off / yes / no as booleans
    return name.strip(), value


def with_overrides(config: PlannerConfig, overrides: Sequence[str]) -> PlannerConfig:
    """`config` with the CLIs' `--set NAME=VALUE` overrides applied, validated as in
    `load_config` (a bad one is a ConfigError naming it)."""
    if not overrides:
        return config
    try:
        return config.with_params(dict(parse_override(item) for item in overrides))
    except ConfigError as e:
        culprit = _override_at_fault(overrides, str(e))
        raise ConfigError(f"--set {culprit!r}: {e}" if culprit else str(e)) from e


def _override_at_fault(overrides: Sequence[str], message: str) -> str | None:
    """The `--set NAME=VALUE` whose NAME the error names (the longest one), or None: the
    error is the params file's. An error may name the override's parameter, a section of it
    (`--set a.b=1` where there is no section `a`) or a parameter under it."""
    head = message.split(" (known:")[0]  # the list of known names names no culprit
    quoted = re.findall(r"'([^']+)'", head)

    def at_fault(name: str) -> bool:
        if f"{name}=" in head:
            return True
        return any(
            q == name or name.startswith(f"{q}.") or q.startswith(f"{name}.") for q in quoted
        )

    named = [
        item for item in overrides if (name := item.partition("=")[0].strip()) and at_fault(name)
    ]
    return max(named, key=lambda item: len(item.partition("=")[0]), default=None)


def add_set_argument(parser: Any) -> None:
    """The CLIs' repeatable `--set NAME=VALUE` (see `load_config`)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one parameter of the params file (dotted name, YAML value), e.g. "
        "--set decoding.strategy=rollouts --set model.device=cuda",
    )


def dump_config(config: PlannerConfig, node_name: str = DEFAULT_NODE_NAME) -> str:
    """The configuration as a ROS 2 params YAML document."""
    doc = {node_name: {"ros__parameters": config_to_params(config)}}
    return yaml.safe_dump(doc, sort_keys=False)


def package_root() -> Path:
    """The folder holding `params/`, `models/`, `launch/`: the source checkout, or the
    installed `share/blockplan` of a colcon/ament install."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "package.xml").is_file() and (parent / "params").is_dir():
            return parent
        share = parent / "share" / "blockplan"
        if (share / "package.xml").is_file():
            return share
    raise ConfigError("cannot locate the blockplan package root (params/, models/)")


def default_params_path() -> Path:
    """The shipped `params/planner.yaml`."""
    return package_root() / "params" / "planner.yaml"
