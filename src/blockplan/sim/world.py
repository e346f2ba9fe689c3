"""World state in REP-103, and the conversion from highway-env coordinates.

highway-env positions are (x, y) with +y to the driver's right at heading 0, and headings
grow towards +y (clockwise seen from above). REP-103 has +y to the left and yaw grows
counter-clockwise, so the conversion is a relabelling of the same physical world:
y_rep = -y_hw, yaw_rep = -heading_hw. A lane's "lateral" coordinate in highway-env is
positive to the driver's right on every lane type, so our left-positive offset is its negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Kinds of boxes in the world.
KIND_VEHICLE = "vehicle"
KIND_OBSTACLE = "obstacle"

VEHICLE_HEIGHT_M = 1.5
OBSTACLE_HEIGHT_M = 1.0


def hw_to_rep_xy(xy_hw: np.ndarray) -> np.ndarray:
    """(..., 2) highway-env positions -> (..., 2) REP-103 positions."""
    out = np.array(xy_hw, dtype=np.float64, copy=True)
    out[..., 1] *= -1.0
    return out


def hw_to_rep_yaw(heading_hw: float) -> float:
    """highway-env heading (clockwise-positive) -> REP-103 yaw, wrapped to (-pi, pi]."""
    return wrap_angle(-heading_hw)


def wrap_angle(a: float | np.ndarray) -> float | np.ndarray:
    """Wrap angles to [-pi, pi]."""
    wrapped = np.arctan2(np.sin(a), np.cos(a))
    return float(wrapped) if np.ndim(wrapped) == 0 else wrapped


@dataclass(frozen=True)
class Box:
    """One object in the world: an oriented 3-D box standing on the ground (REP-103, `odom`).

    id: stable integer per episode. color: (3,) uint8 RGB body colour.
    """

    id: int
    kind: str
    x: float
    y: float
    yaw: float
    speed: float
    length: float
    width: float
    height: float
    color: tuple[int, int, int]


@dataclass(frozen=True)
class EgoPose:
    """The ego's planar pose and motion in `odom` (REP-103). base_link is the vehicle centre
    on the ground plane (highway-env's vehicle position)."""

    x: float
    y: float
    yaw: float
    speed: float


@dataclass(frozen=True)
class Snapshot:
    """The world at one instant: the ego and every other box."""

    t: float
    ego: EgoPose
    boxes: tuple[Box, ...]
