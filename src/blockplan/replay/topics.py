"""Which topics of a bag feed the planner, and how each message becomes a runtime input.

Camera topics come from the configuration (`cameras.<name>.topic`); a camera recorded only
through image_transport's compressed topic (`<topic>/compressed`) is found too. A bag without
any configured camera topic is refused with an error naming the missing topics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blockplan.bags import TopicSummary
from blockplan.config import PlannerConfig
from blockplan.errors import UserError

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
TF_TYPE = "tf2_msgs/msg/TFMessage"
STRING_TYPE = "std_msgs/msg/String"
POSE_STAMPED_TYPE = "geometry_msgs/msg/PoseStamped"
ARRAY_TYPE = "std_msgs/msg/Float64MultiArray"
PATH_TYPE = "nav_msgs/msg/Path"


class ReplayInputError(UserError, ValueError):
    """The bag cannot be replayed with this configuration; the message says why."""


class ReplayOutputError(UserError, ValueError):
    """The output folder cannot take a replay's outputs; the message says what to do."""


@dataclass(frozen=True)
class InputTopics:
    """camera topic → camera name; odometry / route-command / lane-pose / lead-vehicle /
    lanes-beside / route-path topics (None when absent); tf topics to copy to the output."""

    cameras: dict[str, str]
    odometry: str | None
    route_command: str | None
    tf: tuple[str, ...]
    missing_cameras: tuple[str, ...]
    # Configured topics the bag has with another message type: topic -> its type.
    mistyped: dict[str, str] = field(default_factory=dict)
    lane_pose: str | None = None
    lead: str | None = None
    beside: str | None = None
    route_path: str | None = None

    def why_missing(self, topic: str) -> str:
        """Why a configured input topic is not used: absent, or present with another type."""
        if topic in self.mistyped:
            return f"is in the bag as {self.mistyped[topic]}, not the type the planner reads"
        return "is not in the bag"

    @property
    def all(self) -> tuple[str, ...]:
        topics = [*self.cameras, *self.tf]
        inputs = (
            self.odometry,
            self.route_command,
            self.lane_pose,
            self.lead,
            self.beside,
            self.route_path,
        )
        topics += [t for t in inputs if t is not None]
        return tuple(topics)


def _typed(topics: dict[str, TopicSummary], name: str, msgtypes: tuple[str, ...]) -> bool:
    return name in topics and topics[name].msgtype in msgtypes


def resolve_topics(config: PlannerConfig, topics: dict[str, TopicSummary]) -> InputTopics:
    cameras: dict[str, str] = {}
    missing = []
    mistyped: dict[str, str] = {}
    for cam in config.cameras:
        candidates = (cam.topic, f"{cam.topic}/compressed")
        if cam.transport == "compressed" and not cam.topic.endswith("/compressed"):
            candidates = candidates[::-1]
        found = next((t for t in candidates if _typed(topics, t, IMAGE_TYPES)), None)
        if found is None:
            missing.append(cam.topic)
            for t in candidates:
                if t in topics:
                    mistyped.setdefault(cam.topic, topics[t].msgtype or "an unknown type")
        else:
            cameras[found] = cam.name
    if not cameras:
        present = ", ".join(f"{t} [{s.msgtype}]" for t, s in sorted(topics.items())) or "none"
        wrong = "".join(
            f"; {t} is there but as {msgtype}, not {' or '.join(IMAGE_TYPES)}"
            for t, msgtype in mistyped.items()
        )
        raise ReplayInputError(
            f"the bag has none of the configured camera topics {missing} "
            f"(nor their /compressed variants) as images{wrong}; its topics: {present}"
        )
    odom = config.topics.odom
    if odom in topics and not _typed(topics, odom, (ODOMETRY_TYPE,)):
        mistyped[odom] = topics[odom].msgtype or "an unknown type"
    odom = odom if _typed(topics, odom, (ODOMETRY_TYPE,)) else None
    route = config.topics.route_command
    route = route if _typed(topics, route, (STRING_TYPE,)) else None
    lane = config.topics.lane_pose
    lane = lane if _typed(topics, lane, (POSE_STAMPED_TYPE,)) else None
    lead = config.topics.lead_vehicle
    if lead in topics and not _typed(topics, lead, (ODOMETRY_TYPE,)):
        mistyped[lead] = topics[lead].msgtype or "an unknown type"
    lead = lead if _typed(topics, lead, (ODOMETRY_TYPE,)) else None
    beside = config.topics.lanes_beside
    if beside in topics and not _typed(topics, beside, (ARRAY_TYPE,)):
        mistyped[beside] = topics[beside].msgtype or "an unknown type"
    beside = beside if _typed(topics, beside, (ARRAY_TYPE,)) else None
    path = config.topics.route
    if path in topics and not _typed(topics, path, (PATH_TYPE,)):
        mistyped[path] = topics[path].msgtype or "an unknown type"
    path = path if _typed(topics, path, (PATH_TYPE,)) else None
    tf = tuple(t for t in ("/tf", "/tf_static") if _typed(topics, t, (TF_TYPE,)))
    return InputTopics(cameras, odom, route, tf, tuple(missing), mistyped, lane, lead, beside, path)
