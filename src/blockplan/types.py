"""Core data types shared by every stage: frames, ego state, observations, answers, plans.

Conventions (docs/DESIGN.md §3): REP-103 ego frame (x forward, y left, z up), metres, seconds,
radians; stamps are integer nanoseconds; images are H×W×3 uint8 RGB numpy arrays.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

NS_PER_S = 1_000_000_000
# The navigation command when none was received (/planning/route_command): follow the lane.
DEFAULT_ROUTE_COMMAND = "lane_follow"
# Arc lengths along the planned route from the ego's projection (m) at which the planner
# reads the route ahead (`Observation.route_ahead`, blockplan.trajectory.route): the
# roundabout's entry S-curve is within the first 30 m, an intersection's turn within 45 m,
# 60 m is two seconds on the highway.
ROUTE_AHEAD_M = (5.0, 10.0, 20.0, 30.0, 45.0, 60.0)

CRITICAL_OBJECT_KEYS: tuple[str, ...] = (
    "nearby_vehicle",
    "pedestrian",
    "cyclist",
    "construction",
    "traffic_element",
    "weather_condition",
    "road_hazard",
    "emergency_vehicle",
    "animal",
    "special_vehicle",
    "conflicting_vehicle",
    "door_opening_vehicle",
)

NUM_WAYPOINTS = 5  # the model's waypoints at t = 1..5 s
WAYPOINT_PERIOD_S = 1.0


class Longitudinal(str, enum.Enum):
    """Closed vocabulary of the planned longitudinal behaviour."""

    KEEP = "keep"
    ACCELERATE = "accelerate"
    DECELERATE = "decelerate"
    STOP = "stop"


class Lateral(str, enum.Enum):
    """Closed vocabulary of the planned lateral behaviour."""

    LANE_FOLLOW = "lane_follow"
    LANE_CHANGE_LEFT = "lane_change_left"
    LANE_CHANGE_RIGHT = "lane_change_right"
    TURN_LEFT = "turn_left"
    TURN_RIGHT = "turn_right"
    STRAIGHT = "straight"


def seconds_to_ns(seconds: float) -> int:
    return int(round(seconds * NS_PER_S))


def ns_to_seconds(stamp_ns: int) -> float:
    return stamp_ns / NS_PER_S


@dataclass(frozen=True)
class CameraFrame:
    """One camera image. `image` is (H, W, 3) uint8 RGB."""

    camera: str
    stamp_ns: int
    image: np.ndarray

    def __post_init__(self) -> None:
        img = self.image
        if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(
                f"CameraFrame {self.camera!r}: image must be (H, W, 3), got "
                f"{getattr(img, 'shape', type(img))}"
            )
        if img.dtype != np.uint8:
            raise ValueError(
                f"CameraFrame {self.camera!r}: image dtype must be uint8, got {img.dtype}"
            )


@dataclass(frozen=True)
class EgoState:
    """Ego pose in the odometry frame plus body-frame velocity and acceleration.

    x, y, yaw: pose in `odom` (m, m, rad). v_x, v_y: velocity in the body frame (m/s).
    a_x, a_y: acceleration in the body frame (m/s^2). yaw_rate: rad/s.
    """

    stamp_ns: int
    x: float
    y: float
    yaw: float
    v_x: float
    v_y: float = 0.0
    a_x: float = 0.0
    a_y: float = 0.0
    yaw_rate: float = 0.0

    @property
    def speed(self) -> float:
        return float(np.hypot(self.v_x, self.v_y))


@dataclass(frozen=True)
class Observation:
    """Everything the planner sees at time t0.

    frames: K cameras × T frames in view-major order (camera 0 oldest→newest, then camera 1…).
    ego_history: oldest→newest, the last entry is the ego state at t0.
    lane_pose: the ego's pose in its lane at t0 from the localisation, (left-positive offset
    from the lane centre in m, heading error against the lane in rad); None when unknown.
    lead: the car ahead in the ego's lane at t0 from the tracker, (gap in m, its speed in
    m/s); the gap is infinite when no car is ahead; None when unknown.
    beside: the lanes beside the ego's at t0, per side (left, then right): (lanes on that
    side from the map, gap to the nearest car ahead in the lane line on that side in m, its
    speed in m/s, gap to the nearest car behind, its speed) from the map and the tracker; a
    gap is infinite when no car is there, NaN lanes or gaps where unknown; None when unknown.
    route_ahead: where the planned route is `ROUTE_AHEAD_M` metres along it from the ego, as
    (x, y) points in the ego frame at t0 (`blockplan.trajectory.route`), from the router's
    path; None when unknown.
    """

    stamp_ns: int
    frames: tuple[CameraFrame, ...]
    ego_history: tuple[EgoState, ...]
    route_command: str = DEFAULT_ROUTE_COMMAND
    lane_pose: tuple[float, float] | None = None
    lead: tuple[float, float] | None = None
    beside: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    route_ahead: tuple[tuple[float, float], ...] | None = None


@dataclass(frozen=True)
class DrivingAnswer:
    """The planner's structured answer (the driving schema), typed.

    waypoints: (5, 2) float, [x, y] in metres in the ego frame at t0, at t = 1..5 s.
    """

    critical_objects: dict[str, bool]
    explanation: str
    longitudinal: Longitudinal
    lateral: Lateral
    waypoints: np.ndarray

    def __post_init__(self) -> None:
        unknown = set(self.critical_objects) - set(CRITICAL_OBJECT_KEYS)
        missing = set(CRITICAL_OBJECT_KEYS) - set(self.critical_objects)
        if unknown or missing:
            raise ValueError(
                f"DrivingAnswer.critical_objects: unknown keys {sorted(unknown)}, "
                f"missing keys {sorted(missing)}"
            )
        wp = np.asarray(self.waypoints, dtype=np.float64)
        if wp.shape != (NUM_WAYPOINTS, 2):
            raise ValueError(f"DrivingAnswer.waypoints must be (5, 2), got {wp.shape}")
        object.__setattr__(self, "waypoints", wp)


@dataclass(frozen=True)
class Trajectory:
    """A time-parametrised trajectory in the ego frame at its stamp.

    All arrays have shape (P,): time since the stamp (s), position (m), heading (rad),
    speed (m/s), longitudinal acceleration (m/s^2) and curvature (1/m).
    """

    stamp_ns: int
    t: np.ndarray
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    accel: np.ndarray
    curvature: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.t)
        for name in ("x", "y", "yaw", "speed", "accel", "curvature"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"Trajectory.{name} has {len(getattr(self, name))} points, t has {n}"
                )

    @property
    def xy(self) -> np.ndarray:
        """(P, 2) positions."""
        return np.stack([self.x, self.y], axis=-1)


@dataclass(frozen=True)
class Plan:
    """The result of one planner call, stamped with the observation time t0.

    rollouts: (N, 5, 2) waypoint sets (N = 1 without test-time scaling).
    timings_ms: per-stage wall time (encode, prefill, each section, post-processing).
    """

    stamp_ns: int
    answer: DrivingAnswer
    rollouts: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)
    num_forwards: int = 0


@dataclass(frozen=True)
class RobotObservation:
    """Everything a robot planner sees at t0 (the `robot` embodiment, docs/SCHEMA.md
    "The action schema").

    frames: K cameras × T frames in view-major order (e.g. a fixed view and a wrist camera).
    proprio: (S,) float, the proprioceptive state (joint positions, gripper, ...), in the
    units of the data set the model was trained on. instruction: the language instruction.
    """

    stamp_ns: int
    frames: tuple[CameraFrame, ...]
    proprio: np.ndarray
    instruction: str

    def __post_init__(self) -> None:
        state = np.asarray(self.proprio, dtype=np.float64)
        if state.ndim != 1:
            raise ValueError(f"RobotObservation.proprio must be (S,), got {state.shape}")
        object.__setattr__(self, "proprio", state)


@dataclass(frozen=True)
class ActionPlan:
    """One robot planner call: an action chunk, stamped with the observation time t0.

    actions: (H, D) float, the bin centres of the decoded chunk (rollout 0); bins: (H, D)
    int, the bin indices; rollouts: (N, H, D) float (N = 1 without test-time scaling).
    """

    stamp_ns: int
    actions: np.ndarray
    bins: np.ndarray
    rollouts: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)
    num_forwards: int = 0
