"""`topics.*` and `frames.*`: topic names and TF frame ids."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from blockplan.config.fields import _check


@dataclass(frozen=True)
class TopicsConfig:
    """Topic names (docs/DESIGN.md §4); all remappable."""

    odom: str = "/odom"
    route_command: str = "/planning/route_command"
    # geometry_msgs/PoseStamped in the lane frame: the ego's offset from its lane centre
    # (position.y) and heading error (yaw), from the localisation; read by models whose ego
    # encoder takes the lane pose (model/ego.py), ignored by the others.
    lane_pose: str = "/localization/lane_pose"
    # nav_msgs/Odometry of the car ahead in the ego's lane, in base_link: the gap
    # (pose.position.x, infinite when none) and its speed (twist.linear.x), from a tracker or
    # an ACC radar; read by models whose ego encoder takes it (model/ego.py).
    lead_vehicle: str = "/perception/lead_vehicle"
    # std_msgs/Float64MultiArray of the lanes beside the ego's, per side (left, right): the
    # lane count from the map, then the gap to the nearest car ahead and behind in the lane
    # line beside and their speeds, from a tracker (bags/beside.py); read by models whose
    # ego encoder takes it (model/ego.py).
    lanes_beside: str = "/perception/lanes_beside"
    # nav_msgs/Path in odom: the centre line of the lanes the route takes, from near the ego
    # to well ahead (bags/route.py); read by models whose ego encoder takes the route ahead
    # (model/ego.py).
    route: str = "/planning/route"
    trajectory: str = "/planning/trajectory"
    rollouts: str = "/planning/rollouts"
    reasoning: str = "/planning/reasoning"
    diagnostics: str = "/diagnostics"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            _check(
                value.startswith("/"), f"topics.{f.name}", value, "must be an absolute topic name"
            )


@dataclass(frozen=True)
class FramesConfig:
    """TF frame ids: plans are expressed in `base_link` at t0."""

    base_link: str = "base_link"
    odom: str = "odom"

    def __post_init__(self) -> None:
        _check(bool(self.base_link), "frames.base_link", self.base_link, "must not be empty")
        _check(bool(self.odom), "frames.odom", self.odom, "must not be empty")
