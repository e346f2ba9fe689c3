"""Header stamps and planar orientation: integer nanoseconds ↔ builtin_interfaces/Time,
yaw ↔ geometry_msgs/Quaternion. Read side is duck-typed on field names."""

from __future__ import annotations

import math
from typing import Any

from blockplan.bags.namespace import MessageNamespace
from blockplan.types import NS_PER_S

_INT32_MAX = 2**31 - 1


def ns_to_time(ns: MessageNamespace, stamp_ns: int) -> Any:
    """builtin_interfaces/Time from integer nanoseconds (sec floors, nanosec in [0, 1e9))."""
    sec, nanosec = divmod(int(stamp_ns), NS_PER_S)
    if not -_INT32_MAX - 1 <= sec <= _INT32_MAX:
        raise ValueError(
            f"stamp_ns={stamp_ns}: outside the int32 seconds of builtin_interfaces/Time"
        )
    return ns.make("builtin_interfaces/msg/Time", sec=sec, nanosec=nanosec)


def time_to_ns(stamp: Any) -> int:
    """Integer nanoseconds from anything with `sec` and `nanosec` fields."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_duration(ns: MessageNamespace, duration_ns: int) -> Any:
    sec, nanosec = divmod(int(duration_ns), NS_PER_S)
    return ns.make("builtin_interfaces/msg/Duration", sec=sec, nanosec=nanosec)


def make_header(ns: MessageNamespace, stamp_ns: int, frame_id: str) -> Any:
    return ns.make("std_msgs/msg/Header", stamp=ns_to_time(ns, stamp_ns), frame_id=frame_id)


def header_stamp_ns(msg: Any) -> int:
    """The header stamp of a stamped message, in nanoseconds."""
    return time_to_ns(msg.header.stamp)


def yaw_to_quaternion(ns: MessageNamespace, yaw: float) -> Any:
    """A rotation about z by `yaw` radians."""
    half = 0.5 * float(yaw)
    return ns.make("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=math.sin(half), w=math.cos(half))


def quaternion_to_yaw(q: Any) -> float:
    """The z-rotation (yaw) of a quaternion with fields x, y, z, w (ZYX Euler convention)."""
    x, y, z, w = float(q.x), float(q.y), float(q.z), float(q.w)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def rpy_to_quaternion(ns: MessageNamespace, roll: float, pitch: float, yaw: float) -> Any:
    """A quaternion from roll, pitch, yaw (fixed axes x, y, z; REP-103)."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return ns.make(
        "geometry_msgs/msg/Quaternion",
        x=sr * cp * cy - cr * sp * sy,
        y=cr * sp * cy + sr * cp * sy,
        z=cr * cp * sy - sr * sp * cy,
        w=cr * cp * cy + sr * sp * sy,
    )
