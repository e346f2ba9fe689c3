"""The planned route as nav_msgs/Path ↔ (stamp, (P, 2) points in odom).

What a router (or a map module on a lane-level route) publishes: the centre line of the
lanes the vehicle is to drive, from a little behind it to well ahead, in the odometry frame
(`header.frame_id` = odom; each pose's position is a point, its orientation the line's
heading there, not read). The planner reads where the line is 5-60 m ahead of the ego
(blockplan.trajectory.route), so the line must reach at least that far past where the
vehicle will be when the next path arrives. A path in another frame is refused, not
transformed: the planner has no transform for it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.stamps import header_stamp_ns, make_header, yaw_to_quaternion


class RouteFrameError(ValueError):
    """A route path in a frame the planner cannot read (not odom)."""


def route_to_msg(ns: MessageNamespace, stamp_ns: int, path: np.ndarray, frame_id: str) -> Any:
    """(P, 2) route points in `frame_id` (odom) → nav_msgs/Path stamped `stamp_ns`; each
    pose's heading points to the next point."""
    xy = np.asarray(path, dtype=np.float64).reshape(-1, 2)
    step = np.diff(xy, axis=0)
    heading = np.arctan2(step[:, 1], step[:, 0]) if len(step) else np.zeros(0)
    heading = np.concatenate([heading, heading[-1:]]) if len(heading) else np.zeros(len(xy))
    header = make_header(ns, stamp_ns, frame_id)
    poses = [
        ns.make(
            "geometry_msgs/msg/PoseStamped",
            header=header,
            pose=ns.make(
                "geometry_msgs/msg/Pose",
                position=ns.make("geometry_msgs/msg/Point", x=float(x), y=float(y), z=0.0),
                orientation=yaw_to_quaternion(ns, float(h) if math.isfinite(h) else 0.0),
            ),
        )
        for (x, y), h in zip(xy, heading, strict=True)
    ]
    return ns.make("nav_msgs/msg/Path", header=header, poses=poses)


def route_from_msg(msg: Any, odom_frame: str) -> tuple[int, np.ndarray]:
    """nav_msgs/Path in `odom_frame` → (stamp_ns, (P, 2) points); the values as found (the
    runtime refuses a short or non-finite path). Raises `RouteFrameError` for another frame."""
    frame = str(msg.header.frame_id)
    if frame != odom_frame:
        raise RouteFrameError(f"route in frame {frame!r}: the planner reads it in {odom_frame!r}")
    xy = np.array(
        [[p.pose.position.x, p.pose.position.y] for p in msg.poses], dtype=np.float64
    ).reshape(-1, 2)
    return header_stamp_ns(msg), xy
