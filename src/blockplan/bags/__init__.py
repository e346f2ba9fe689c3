"""ROS 2 bag I/O and message ↔ core-type conversion, shared by replay and the live node.

Conversion functions read messages by field name and build them through a message namespace
(`TypestoreMessages` for rosbags, `ModuleMessages` for rclpy's generated classes), so the same
code serves both.
"""

from blockplan.bags.ego import (
    StaticFrame,
    ego_to_odometry,
    ego_to_tf,
    odometry_to_ego,
    static_frames_to_tf,
    tf_to_poses,
)
from blockplan.bags.images import (
    RAW_ENCODINGS,
    ImageDecodeError,
    decode_compressed_image,
    decode_image,
    encode_compressed_image,
    encode_image,
    frame_to_image_msg,
    image_msg_to_frame,
    is_compressed_image,
)
from blockplan.bags.io import (
    QOS_LATCHED,
    QOS_RELIABLE,
    QOS_SENSOR_DATA,
    BagError,
    BagReader,
    BagRecord,
    BagWriter,
    TopicSummary,
    default_qos,
    open_bag_reader,
)
from blockplan.bags.namespace import (
    MessageFieldError,
    MessageNamespace,
    ModuleMessages,
    TypestoreMessages,
    default_typestore,
)
from blockplan.bags.planning import (
    DIAGNOSTIC_LEVELS,
    RolloutMarkerPublisher,
    diagnostics_from_msg,
    diagnostics_to_msg,
    path_to_arrays,
    plan_to_reasoning,
    reasoning_to_msg,
    rollouts_to_markers,
    string_msg,
    trajectory_to_path,
)
from blockplan.bags.stamps import (
    header_stamp_ns,
    make_header,
    ns_to_time,
    quaternion_to_yaw,
    time_to_ns,
    yaw_to_quaternion,
)

__all__ = [
    "DIAGNOSTIC_LEVELS",
    "QOS_LATCHED",
    "QOS_RELIABLE",
    "QOS_SENSOR_DATA",
    "RAW_ENCODINGS",
    "BagError",
    "BagReader",
    "BagRecord",
    "BagWriter",
    "ImageDecodeError",
    "MessageFieldError",
    "MessageNamespace",
    "ModuleMessages",
    "RolloutMarkerPublisher",
    "StaticFrame",
    "TopicSummary",
    "TypestoreMessages",
    "decode_compressed_image",
    "decode_image",
    "default_qos",
    "default_typestore",
    "diagnostics_from_msg",
    "diagnostics_to_msg",
    "ego_to_odometry",
    "ego_to_tf",
    "encode_compressed_image",
    "encode_image",
    "frame_to_image_msg",
    "header_stamp_ns",
    "image_msg_to_frame",
    "is_compressed_image",
    "make_header",
    "ns_to_time",
    "odometry_to_ego",
    "open_bag_reader",
    "path_to_arrays",
    "plan_to_reasoning",
    "quaternion_to_yaw",
    "reasoning_to_msg",
    "rollouts_to_markers",
    "static_frames_to_tf",
    "string_msg",
    "tf_to_poses",
    "time_to_ns",
    "trajectory_to_path",
    "yaw_to_quaternion",
]
