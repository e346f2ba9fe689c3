"""The car ahead in the ego's lane as nav_msgs/Odometry ↔ (stamp, gap, speed).

What an adaptive cruise control's radar or an object tracker reports about the vehicle it
follows. The message is the tracked object's odometry in the ego frame: `header.frame_id`
is base_link, `child_frame_id` names the object (`LEAD_FRAME`), `pose.pose.position.x` is
the gap along the ego's heading (m, centre to centre, as the simulator's labels measure it)
and `twist.twist.linear.x` the object's own speed (m/s, in its frame, as Odometry's twist
is). When no car is ahead in the lane the tracker still reports, with an infinite gap and a
zero twist, so that "nothing ahead" and "no report" stay different things (docs/DESIGN.md §4).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.stamps import header_stamp_ns, make_header

LEAD_FRAME = "lead_vehicle"


def lead_to_msg(
    ns: MessageNamespace, stamp_ns: int, gap_m: float, speed_mps: float, base_frame: str
) -> Any:
    """(gap, speed) at `stamp_ns` → nav_msgs/Odometry of the car ahead in `base_frame`; an
    infinite gap (no car ahead) is written as it is, with a zero speed."""
    none_ahead = math.isinf(gap_m) and gap_m > 0
    speed = 0.0 if none_ahead else float(speed_mps)
    point = ns.make("geometry_msgs/msg/Point", x=float(gap_m), y=0.0, z=0.0)
    orientation = ns.make("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=0.0, w=1.0)
    pose = ns.make("geometry_msgs/msg/Pose", position=point, orientation=orientation)
    linear = ns.make("geometry_msgs/msg/Vector3", x=speed, y=0.0, z=0.0)
    angular = ns.make("geometry_msgs/msg/Vector3", x=0.0, y=0.0, z=0.0)
    return ns.make(
        "nav_msgs/msg/Odometry",
        header=make_header(ns, stamp_ns, base_frame),
        child_frame_id=LEAD_FRAME,
        pose=ns.make("geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=np.zeros(36)),
        twist=ns.make(
            "geometry_msgs/msg/TwistWithCovariance",
            twist=ns.make("geometry_msgs/msg/Twist", linear=linear, angular=angular),
            covariance=np.zeros(36),
        ),
    )


def lead_from_msg(msg: Any) -> tuple[int, float, float]:
    """nav_msgs/Odometry of the car ahead → (stamp_ns, gap m, speed m/s); the values as found
    (the runtime rejects a NaN or non-positive gap)."""
    return (
        header_stamp_ns(msg),
        float(msg.pose.pose.position.x),
        float(msg.twist.twist.linear.x),
    )
