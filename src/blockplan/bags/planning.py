"""Planner outputs → ROS messages: Trajectory → nav_msgs/Path, rollouts →
visualization_msgs/MarkerArray, reasoning → std_msgs/String (JSON), health →
diagnostic_msgs/DiagnosticArray. Plans are in `base_link` at t0 and stamped with t0."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.stamps import (
    header_stamp_ns,
    make_header,
    ns_to_duration,
    quaternion_to_yaw,
    yaw_to_quaternion,
)
from blockplan.types import Plan, Trajectory, seconds_to_ns

DIAGNOSTIC_LEVELS = {"OK": 0, "WARN": 1, "ERROR": 2, "STALE": 3}


def trajectory_to_path(ns: MessageNamespace, traj: Trajectory, frame_id: str = "base_link") -> Any:
    """nav_msgs/Path: one PoseStamped per point, stamped t0 + t[i], orientation from yaw."""
    poses = []
    for t, x, y, yaw in zip(traj.t, traj.x, traj.y, traj.yaw, strict=True):
        pose = ns.make(
            "geometry_msgs/msg/Pose",
            position=ns.make("geometry_msgs/msg/Point", x=float(x), y=float(y), z=0.0),
            orientation=yaw_to_quaternion(ns, float(yaw)),
        )
        poses.append(
            ns.make(
                "geometry_msgs/msg/PoseStamped",
                header=make_header(ns, traj.stamp_ns + seconds_to_ns(float(t)), frame_id),
                pose=pose,
            )
        )
    return ns.make(
        "nav_msgs/msg/Path", header=make_header(ns, traj.stamp_ns, frame_id), poses=poses
    )


def path_to_arrays(msg: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """nav_msgs/Path → (stamp_ns, t (P,) seconds since the header stamp, xy (P, 2), yaw (P,))."""
    stamp = header_stamp_ns(msg)
    t = np.array([(header_stamp_ns(p) - stamp) * 1e-9 for p in msg.poses], dtype=np.float64)
    xy = np.array(
        [[p.pose.position.x, p.pose.position.y] for p in msg.poses], dtype=np.float64
    ).reshape(-1, 2)
    yaw = np.array([quaternion_to_yaw(p.pose.orientation) for p in msg.poses], dtype=np.float64)
    return stamp, t, xy, yaw


def _color(ns: MessageNamespace, index: int, count: int) -> Any:
    """Distinct hues per rollout, translucent so the averaged path stays visible."""
    hue = index / max(count, 1)
    r, g, b = (0.5 + 0.5 * math.cos(2 * math.pi * (hue + k / 3)) for k in range(3))
    return ns.make("std_msgs/msg/ColorRGBA", r=r, g=g, b=b, a=0.7)


def rollouts_to_markers(
    ns: MessageNamespace,
    rollouts: np.ndarray,
    stamp_ns: int,
    frame_id: str = "base_link",
    previous_count: int = 0,
    namespace: str = "rollouts",
    line_width: float = 0.15,
) -> Any:
    """visualization_msgs/MarkerArray: one LINE_STRIP per rollout (ids 0..N-1) starting at the
    ego origin. When fewer rollouts than `previous_count` are published, a DELETEALL marker
    comes first so stale strips disappear."""
    rollouts = np.asarray(rollouts, dtype=np.float64)  # (N, P, 2)
    if rollouts.ndim != 3 or rollouts.shape[2] != 2:
        raise ValueError(f"rollouts must be (N, P, 2), got {rollouts.shape}")
    marker_type = "visualization_msgs/msg/Marker"
    header = make_header(ns, stamp_ns, frame_id)
    markers = []
    if rollouts.shape[0] < previous_count:
        markers.append(
            ns.make(
                marker_type,
                header=header,
                ns=namespace,
                id=0,
                action=ns.constant(marker_type, "DELETEALL"),
            )
        )
    identity = ns.make("geometry_msgs/msg/Pose", orientation=yaw_to_quaternion(ns, 0.0))
    for i, points in enumerate(rollouts):
        with_origin = np.vstack([np.zeros((1, 2)), points])  # (P+1, 2)
        markers.append(
            ns.make(
                marker_type,
                header=header,
                ns=namespace,
                id=i,
                type=ns.constant(marker_type, "LINE_STRIP"),
                action=ns.constant(marker_type, "ADD"),
                pose=identity,
                scale=ns.make("geometry_msgs/msg/Vector3", x=line_width, y=0.0, z=0.0),
                color=_color(ns, i, rollouts.shape[0]),
                lifetime=ns_to_duration(ns, 0),
                points=[
                    ns.make("geometry_msgs/msg/Point", x=float(x), y=float(y), z=0.0)
                    for x, y in with_origin
                ],
            )
        )
    return ns.make("visualization_msgs/msg/MarkerArray", markers=markers)


class RolloutMarkerPublisher:
    """Remembers how many strips were last published, so shrinking counts send DELETEALL."""

    def __init__(self, frame_id: str = "base_link", namespace: str = "rollouts") -> None:
        self.frame_id = frame_id
        self.namespace = namespace
        self.num_published = 0

    def to_msg(self, ns: MessageNamespace, rollouts: np.ndarray, stamp_ns: int) -> Any:
        msg = rollouts_to_markers(
            ns, rollouts, stamp_ns, self.frame_id, self.num_published, self.namespace
        )
        self.num_published = int(np.asarray(rollouts).shape[0])
        return msg


def plan_to_reasoning(plan: Plan, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-able reasoning record of a plan: critical objects, explanation, meta
    behaviour, timings."""
    answer = plan.answer
    record: dict[str, Any] = {
        "stamp_ns": int(plan.stamp_ns),
        "critical_objects": {k: bool(v) for k, v in answer.critical_objects.items()},
        "explanation": answer.explanation,
        "meta_behavior": {
            "longitudinal": answer.longitudinal.value,
            "lateral": answer.lateral.value,
        },
        "waypoints": np.asarray(answer.waypoints).round(3).tolist(),
        "num_rollouts": int(np.asarray(plan.rollouts).shape[0]),
        "num_forwards": int(plan.num_forwards),
        "timings_ms": {k: round(float(v), 3) for k, v in plan.timings_ms.items()},
    }
    if extra:
        record.update(extra)
    return record


def string_msg(ns: MessageNamespace, text: str) -> Any:
    return ns.make("std_msgs/msg/String", data=text)


def reasoning_to_msg(ns: MessageNamespace, plan: Plan, extra: Mapping | None = None) -> Any:
    """std_msgs/String carrying `plan_to_reasoning` as compact JSON."""
    return string_msg(ns, json.dumps(plan_to_reasoning(plan, extra), separators=(",", ":")))


def diagnostics_to_msg(ns: MessageNamespace, stamp_ns: int, statuses: Sequence[Any]) -> Any:
    """diagnostic_msgs/DiagnosticArray from status records with fields name, level (0 OK,
    1 WARN, 2 ERROR, 3 STALE), message, hardware_id and values (a mapping; values become
    strings)."""
    out = []
    for status in statuses:
        level = int(status.level)
        if level not in DIAGNOSTIC_LEVELS.values():
            raise ValueError(f"diagnostic status {status.name!r}: level {level} not in 0..3")
        values = [
            ns.make("diagnostic_msgs/msg/KeyValue", key=str(k), value=_format_value(v))
            for k, v in status.values.items()
        ]
        out.append(
            ns.make(
                "diagnostic_msgs/msg/DiagnosticStatus",
                level=level,
                name=str(status.name),
                message=str(status.message),
                hardware_id=str(status.hardware_id),
                values=values,
            )
        )
    return ns.make(
        "diagnostic_msgs/msg/DiagnosticArray", header=make_header(ns, stamp_ns, ""), status=out
    )


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def diagnostics_from_msg(msg: Any) -> list[dict[str, Any]]:
    """DiagnosticArray → [{name, level, message, hardware_id, values}] (level as int)."""
    out = []
    for s in msg.status:
        level = s.level[0] if isinstance(s.level, (bytes, bytearray)) else int(s.level)
        out.append(
            {
                "name": str(s.name),
                "level": level,
                "message": str(s.message),
                "hardware_id": str(s.hardware_id),
                "values": {str(kv.key): str(kv.value) for kv in s.values},
            }
        )
    return out
