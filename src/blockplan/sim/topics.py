"""Topic names, message types and frame ids of the bags `blockplan simulate` writes.

The replay reads these names to find the cameras, odometry and the ground truth it scores
itself against. Camera, odometry, route-command, lane-pose, lead-vehicle, lanes-beside and
route topics are the planner's inputs
(docs/DESIGN.md §4); the ground truth lives under /ground_truth so a replay never mistakes it for
an input.
"""

from __future__ import annotations

from blockplan.config import DEFAULT_CAMERA_TOPIC

ODOM_TOPIC = "/odom"  # nav_msgs/msg/Odometry, odom -> base_link, every simulation step (20 Hz)
TF_TOPIC = "/tf"  # tf2_msgs/msg/TFMessage, odom -> base_link, with every odometry message
TF_STATIC_TOPIC = "/tf_static"  # tf2_msgs/msg/TFMessage, base_link -> camera frames, once
ROUTE_COMMAND_TOPIC = "/planning/route_command"  # std_msgs/msg/String, with every camera tick
# geometry_msgs/msg/PoseStamped in the lane frame (offset, heading error), every step (20 Hz)
LANE_POSE_TOPIC = "/localization/lane_pose"
# nav_msgs/msg/Odometry of the car ahead in the ego's lane in base_link (gap, its speed;
# an infinite gap when none), every step (20 Hz): what a tracker or an ACC radar reports
LEAD_TOPIC = "/perception/lead_vehicle"
# std_msgs/msg/Float64MultiArray, per side: the map's lane count and the tracker's nearest
# cars ahead and behind in the lane line beside (bags/beside.py), every step (20 Hz)
BESIDE_TOPIC = "/perception/lanes_beside"
# nav_msgs/msg/Path in odom: the route ahead of the ego along its planned route, 10 m behind
# to 120 m ahead (sim/route_path.py), with every camera tick: what a router publishes
ROUTE_TOPIC = "/planning/route"
GT_PATH_TOPIC = "/ground_truth/future_path"  # nav_msgs/msg/Path: 20 points at 4 Hz, base_link@t0
GT_LABELS_TOPIC = "/ground_truth/labels"  # std_msgs/msg/String: JSON label (see sim/bag.py)

ODOM_FRAME = "odom"
BASE_FRAME = "base_link"

TOPIC_TYPES: dict[str, str] = {
    ODOM_TOPIC: "nav_msgs/msg/Odometry",
    TF_TOPIC: "tf2_msgs/msg/TFMessage",
    TF_STATIC_TOPIC: "tf2_msgs/msg/TFMessage",
    ROUTE_COMMAND_TOPIC: "std_msgs/msg/String",
    LANE_POSE_TOPIC: "geometry_msgs/msg/PoseStamped",
    LEAD_TOPIC: "nav_msgs/msg/Odometry",
    BESIDE_TOPIC: "std_msgs/msg/Float64MultiArray",
    ROUTE_TOPIC: "nav_msgs/msg/Path",
    GT_PATH_TOPIC: "nav_msgs/msg/Path",
    GT_LABELS_TOPIC: "std_msgs/msg/String",
}


def camera_topic(name: str, compressed: bool = False) -> str:
    """`/camera/<name>/image_raw`, or `.../image_raw/compressed` for CompressedImage (jpeg)."""
    base = DEFAULT_CAMERA_TOPIC.format(name=name)
    return f"{base}/compressed" if compressed else base
