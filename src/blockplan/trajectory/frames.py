"""Planar poses and the kinematic state a trajectory starts from.

`Pose2D` is a rigid transform of the plane (REP-103: x forward, y left, yaw counter-clockwise
from x). A pose `P` of frame B in frame A maps points written in B to points written in A:
`P.transform_points(p_B) = R(yaw) @ p_B + (x, y)`. `A.compose(B)` is the pose of B's child
frame in A's parent frame (A ∘ B); `A.inverse()` undoes A.

`KinematicState` is the vehicle's instantaneous state in its own ego frame (the vehicle sits at
the origin facing +x), which is how the control loop and the JMT join read "the commanded
state":

* `v` (speed, m/s, >= 0), `a` (longitudinal acceleration along the heading, m/s^2) and
  `curvature` (1/m, positive to the left) describe a vehicle moving along its heading. From
  these the ego-frame velocity is (v, 0) and the acceleration (a, v² κ) (centripetal part).
* Optionally the full ego-frame vectors `vx, vy` (m/s) and `ax, ay` (m/s^2), e.g. from
  odometry with side slip. When given they take precedence for the vector boundary
  conditions of a JMT; each pair is given together or not at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blockplan.types import EgoState

# Below this speed the heading of the velocity vector is meaningless (docs/ALGORITHMS.md §5):
# headings and curvatures derived from velocity are held at their last meaningful value.
MIN_SPEED_FOR_HEADING = 0.5


def rotation(yaw: float) -> np.ndarray:
    """(2, 2) rotation matrix by `yaw` radians."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s], [s, c]])


def wrap_angle(angle: float | np.ndarray) -> float | np.ndarray:
    """Angle(s) wrapped to [-pi, pi)."""
    return (np.asarray(angle) + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class Pose2D:
    """A planar pose (x, y, yaw): the pose of a child frame expressed in a parent frame."""

    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0

    def __post_init__(self) -> None:
        for name in ("x", "y", "yaw"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"Pose2D.{name}={value!r}: must be finite")

    @classmethod
    def from_ego_state(cls, ego: EgoState) -> Pose2D:
        """The ego pose of an `EgoState` (odometry frame)."""
        return cls(float(ego.x), float(ego.y), float(ego.yaw))

    def compose(self, other: Pose2D) -> Pose2D:
        """self ∘ other: `other` (given in self's child frame) expressed in self's parent."""
        x, y = rotation(self.yaw) @ np.array([other.x, other.y]) + np.array([self.x, self.y])
        return Pose2D(float(x), float(y), float(wrap_angle(self.yaw + other.yaw)))

    def inverse(self) -> Pose2D:
        """The pose of the parent frame in the child frame."""
        x, y = -(rotation(-self.yaw) @ np.array([self.x, self.y]))
        return Pose2D(float(x), float(y), float(wrap_angle(-self.yaw)))

    def transform_points(self, points: np.ndarray) -> np.ndarray:
        """(..., 2) points in the child frame → (..., 2) points in the parent frame."""
        pts = np.asarray(points, dtype=np.float64)
        if pts.shape[-1] != 2:
            raise ValueError(f"transform_points: points must be (..., 2), got {pts.shape}")
        return pts @ rotation(self.yaw).T + np.array([self.x, self.y])

    def rotate_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """(..., 2) free vectors (velocities, accelerations) rotated into the parent frame."""
        vec = np.asarray(vectors, dtype=np.float64)
        return vec @ rotation(self.yaw).T


def _optional_pair(name_a: str, a: float | None, name_b: str, b: float | None) -> None:
    if (a is None) != (b is None):
        raise ValueError(f"KinematicState.{name_a}={a!r}, {name_b}={b!r}: give both or neither")
    for name, value in ((name_a, a), (name_b, b)):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"KinematicState.{name}={value!r}: must be finite")


@dataclass(frozen=True)
class KinematicState:
    """Speed, longitudinal acceleration and curvature of the ego (and optionally its ego-frame
    velocity and acceleration vectors). See the module docstring for the conventions."""

    v: float
    a: float = 0.0
    curvature: float = 0.0
    vx: float | None = None
    vy: float | None = None
    ax: float | None = None
    ay: float | None = None

    def __post_init__(self) -> None:
        for name in ("v", "a", "curvature"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"KinematicState.{name}={value!r}: must be finite")
        if self.v < 0:
            raise ValueError(f"KinematicState.v={self.v!r}: speed must be >= 0")
        _optional_pair("vx", self.vx, "vy", self.vy)
        _optional_pair("ax", self.ax, "ay", self.ay)

    @property
    def speed(self) -> float:
        return self.v

    @property
    def accel(self) -> float:
        return self.a

    @property
    def velocity(self) -> np.ndarray:
        """(2,) ego-frame velocity: (vx, vy) when given, else (v, 0)."""
        if self.vx is not None and self.vy is not None:
            return np.array([self.vx, self.vy], dtype=np.float64)
        return np.array([self.v, 0.0])

    @property
    def acceleration(self) -> np.ndarray:
        """(2,) ego-frame acceleration: (ax, ay) when given, else (a, v² κ)."""
        if self.ax is not None and self.ay is not None:
            return np.array([self.ax, self.ay], dtype=np.float64)
        return np.array([self.a, self.v * self.v * self.curvature])

    @classmethod
    def from_ego_state(cls, ego: EgoState) -> KinematicState:
        """From odometry: speed |v|, acceleration along the velocity, curvature = yaw rate / v
        (0 below `MIN_SPEED_FOR_HEADING`, where it is not observable)."""
        speed = ego.speed
        a = (ego.v_x * ego.a_x + ego.v_y * ego.a_y) / speed if speed > 0 else ego.a_x
        curvature = ego.yaw_rate / speed if speed >= MIN_SPEED_FOR_HEADING else 0.0
        return cls(
            v=float(speed),
            a=float(a),
            curvature=float(curvature),
            vx=float(ego.v_x),
            vy=float(ego.v_y),
            ax=float(ego.a_x),
            ay=float(ego.a_y),
        )
