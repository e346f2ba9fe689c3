"""nav_msgs/Odometry ↔ EgoState and TF (odom → base_link, static base_link → camera frames).

Odometry carries the pose in `header.frame_id` (odom) and the twist in `child_frame_id`
(base_link), so v_x, v_y, yaw_rate are body-frame as EgoState wants. Odometry has no
acceleration: the runtime derives it from the history; here a_x = a_y = 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.stamps import (
    header_stamp_ns,
    make_header,
    quaternion_to_yaw,
    rpy_to_quaternion,
    yaw_to_quaternion,
)
from blockplan.types import EgoState

# tf2's tolerance: a quaternion whose norm is farther than this from 1 is no rotation (tf2
# drops such transforms as TF_DENORMALIZED_QUATERNION); a zero quaternion has no yaw at all.
QUATERNION_NORM_TOLERANCE = 0.01


class OdometryError(ValueError):
    """An odometry message that cannot be an ego state (its orientation is no rotation);
    the adapter counts it (`runtime.on_invalid_input(InvalidInput.ODOMETRY_INVALID_QUATERNION, ...)`)."""


def odometry_to_ego(msg: Any) -> EgoState:
    """nav_msgs/Odometry → EgoState (values as found; the runtime rejects non-finite ones).
    Raises OdometryError for an orientation that is not a unit quaternion (a zero one)."""
    pose, twist = msg.pose.pose, msg.twist.twist
    q = pose.orientation
    norm = math.sqrt(float(q.x) ** 2 + float(q.y) ** 2 + float(q.z) ** 2 + float(q.w) ** 2)
    if math.isfinite(norm) and abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        raise OdometryError(
            f"odometry at {header_stamp_ns(msg)} ns: orientation quaternion "
            f"({float(q.x):g}, {float(q.y):g}, {float(q.z):g}, {float(q.w):g}) has norm "
            f"{norm:.3g}, not 1: no rotation"
        )
    return EgoState(
        stamp_ns=header_stamp_ns(msg),
        x=float(pose.position.x),
        y=float(pose.position.y),
        yaw=quaternion_to_yaw(pose.orientation),
        v_x=float(twist.linear.x),
        v_y=float(twist.linear.y),
        yaw_rate=float(twist.angular.z),
    )


def ego_to_odometry(
    ns: MessageNamespace, ego: EgoState, odom_frame: str = "odom", base_frame: str = "base_link"
) -> Any:
    """EgoState → nav_msgs/Odometry (covariances left at zero: unknown)."""
    pose = ns.make(
        "geometry_msgs/msg/Pose",
        position=ns.make("geometry_msgs/msg/Point", x=ego.x, y=ego.y, z=0.0),
        orientation=yaw_to_quaternion(ns, ego.yaw),
    )
    twist = ns.make(
        "geometry_msgs/msg/Twist",
        linear=ns.make("geometry_msgs/msg/Vector3", x=ego.v_x, y=ego.v_y, z=0.0),
        angular=ns.make("geometry_msgs/msg/Vector3", x=0.0, y=0.0, z=ego.yaw_rate),
    )
    return ns.make(
        "nav_msgs/msg/Odometry",
        header=make_header(ns, ego.stamp_ns, odom_frame),
        child_frame_id=base_frame,
        pose=ns.make("geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=np.zeros(36)),
        twist=ns.make(
            "geometry_msgs/msg/TwistWithCovariance", twist=twist, covariance=np.zeros(36)
        ),
    )


@dataclass(frozen=True)
class StaticFrame:
    """A fixed child frame of base_link (a camera): translation (m) and roll/pitch/yaw (rad)."""

    child_frame_id: str
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float] = (0.0, 0.0, 0.0)


def _transform_stamped(
    ns: MessageNamespace, stamp_ns: int, parent: str, child: str, xyz: Sequence[float], rot: Any
) -> Any:
    return ns.make(
        "geometry_msgs/msg/TransformStamped",
        header=make_header(ns, stamp_ns, parent),
        child_frame_id=child,
        transform=ns.make(
            "geometry_msgs/msg/Transform",
            translation=ns.make(
                "geometry_msgs/msg/Vector3", x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2])
            ),
            rotation=rot,
        ),
    )


def ego_to_tf(
    ns: MessageNamespace, ego: EgoState, odom_frame: str = "odom", base_frame: str = "base_link"
) -> Any:
    """tf2_msgs/TFMessage with the odom → base_link transform of `ego`."""
    tf = _transform_stamped(
        ns,
        ego.stamp_ns,
        odom_frame,
        base_frame,
        (ego.x, ego.y, 0.0),
        yaw_to_quaternion(ns, ego.yaw),
    )
    return ns.make("tf2_msgs/msg/TFMessage", transforms=[tf])


def static_frames_to_tf(
    ns: MessageNamespace,
    frames: Sequence[StaticFrame],
    stamp_ns: int,
    base_frame: str = "base_link",
) -> Any:
    """tf2_msgs/TFMessage for /tf_static: base_link → each camera frame."""
    transforms = [
        _transform_stamped(
            ns, stamp_ns, base_frame, f.child_frame_id, f.xyz, rpy_to_quaternion(ns, *f.rpy)
        )
        for f in frames
    ]
    return ns.make("tf2_msgs/msg/TFMessage", transforms=transforms)


def tf_to_poses(msg: Any) -> dict[tuple[str, str], tuple[int, float, float, float]]:
    """TFMessage → {(parent, child): (stamp_ns, x, y, yaw)} (planar view of each transform)."""
    out = {}
    for tf in msg.transforms:
        t = tf.transform
        out[(str(tf.header.frame_id), str(tf.child_frame_id))] = (
            header_stamp_ns(tf),
            float(t.translation.x),
            float(t.translation.y),
            quaternion_to_yaw(t.rotation),
        )
    return out


# The ego's pose in its lane (localisation on the map) as geometry_msgs/PoseStamped in a
# lane frame that moves along the lane with the ego: x = 0, y = the left-positive offset
# from the lane centre, yaw = the heading error against the lane (docs/DESIGN.md §4).
LANE_FRAME = "lane"


def lane_pose_to_msg(
    ns: MessageNamespace, stamp_ns: int, offset_m: float, heading_rad: float
) -> Any:
    """(offset, heading error) at `stamp_ns` → geometry_msgs/PoseStamped in `LANE_FRAME`."""
    pose = ns.make(
        "geometry_msgs/msg/Pose",
        position=ns.make("geometry_msgs/msg/Point", x=0.0, y=float(offset_m), z=0.0),
        orientation=yaw_to_quaternion(ns, heading_rad),
    )
    return ns.make(
        "geometry_msgs/msg/PoseStamped", header=make_header(ns, stamp_ns, LANE_FRAME), pose=pose
    )


def lane_pose_from_msg(msg: Any) -> tuple[int, float, float]:
    """geometry_msgs/PoseStamped in the lane frame → (stamp_ns, offset m, heading error rad)."""
    pose = msg.pose
    return header_stamp_ns(msg), float(pose.position.y), quaternion_to_yaw(pose.orientation)
