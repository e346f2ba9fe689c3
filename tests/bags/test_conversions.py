"""Odometry, TF, Path, MarkerArray, reasoning and diagnostics conversions."""

from __future__ import annotations

import array
import json
import math
from typing import NamedTuple

import numpy as np
import pytest

from blockplan.bags import (
    MessageFieldError,
    ModuleMessages,
    RolloutMarkerPublisher,
    StaticFrame,
    TypestoreMessages,
    diagnostics_from_msg,
    diagnostics_to_msg,
    ego_to_odometry,
    ego_to_tf,
    ns_to_time,
    odometry_to_ego,
    path_to_arrays,
    reasoning_to_msg,
    route_from_msg,
    route_to_msg,
    static_frames_to_tf,
    tf_to_poses,
    time_to_ns,
    trajectory_to_path,
)
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    DrivingAnswer,
    EgoState,
    Lateral,
    Longitudinal,
    Plan,
    Trajectory,
)

NS = TypestoreMessages()


@pytest.mark.parametrize("stamp", [0, 1, 999_999_999, 1_000_000_000, 1_732_000_000_123_456_789, -5])
def test_stamp_round_trip(stamp: int) -> None:
    t = ns_to_time(NS, stamp)
    assert 0 <= t.nanosec < 1_000_000_000
    assert time_to_ns(t) == stamp


def test_stamp_out_of_range() -> None:
    with pytest.raises(ValueError, match="int32"):
        ns_to_time(NS, 2**31 * 1_000_000_000)


@pytest.mark.parametrize("yaw", [0.0, 0.5, -2.0, math.pi - 1e-6])
def test_odometry_round_trip(yaw: float) -> None:
    ego = EgoState(stamp_ns=12_345, x=3.5, y=-1.25, yaw=yaw, v_x=7.0, v_y=0.3, yaw_rate=0.1)
    msg = ego_to_odometry(NS, ego)
    assert msg.header.frame_id == "odom" and msg.child_frame_id == "base_link"
    back = odometry_to_ego(msg)
    assert back.stamp_ns == ego.stamp_ns
    for name in ("x", "y", "yaw", "v_x", "v_y", "yaw_rate"):
        assert getattr(back, name) == pytest.approx(getattr(ego, name), abs=1e-9)
    data = NS.typestore.serialize_cdr(msg, msg.__msgtype__)
    assert odometry_to_ego(NS.typestore.deserialize_cdr(data, msg.__msgtype__)) == back


def test_tf_dynamic_and_static() -> None:
    ego = EgoState(stamp_ns=5, x=1.0, y=2.0, yaw=0.7, v_x=0.0)
    poses = tf_to_poses(ego_to_tf(NS, ego))
    stamp, x, y, yaw = poses[("odom", "base_link")]
    assert (stamp, x, y) == (5, 1.0, 2.0) and yaw == pytest.approx(0.7)
    frames = [StaticFrame("cam_front", (1.5, 0.0, 1.4), (-math.pi / 2, 0.0, -math.pi / 2))]
    msg = static_frames_to_tf(NS, frames, 0)
    q = msg.transforms[0].transform.rotation
    assert math.isclose(q.x**2 + q.y**2 + q.z**2 + q.w**2, 1.0)
    # REP-103 optical frame: rotation (-90° about x, then -90° about z) = quaternion (-½,½,-½,½).
    assert [q.x, q.y, q.z, q.w] == pytest.approx([-0.5, 0.5, -0.5, 0.5])


def _trajectory(stamp: int = 10**9) -> Trajectory:
    t = np.arange(1, 21) * 0.25
    x = 5.0 * t
    y = 0.1 * t**2
    return Trajectory(
        stamp_ns=stamp,
        t=t,
        x=x,
        y=y,
        yaw=np.arctan2(0.2 * t, 5.0),
        speed=np.full(20, 5.0),
        accel=np.zeros(20),
        curvature=np.zeros(20),
    )


def test_trajectory_to_path_round_trip() -> None:
    traj = _trajectory()
    msg = trajectory_to_path(NS, traj)
    assert msg.header.frame_id == "base_link" and len(msg.poses) == 20
    stamp, t, xy, yaw = path_to_arrays(msg)
    assert stamp == traj.stamp_ns
    np.testing.assert_allclose(t, traj.t, atol=1e-9)
    np.testing.assert_allclose(xy, traj.xy)
    np.testing.assert_allclose(yaw, traj.yaw, atol=1e-12)


def test_route_path_round_trip_and_frame() -> None:
    """The router's nav_msgs/Path: the points come back as written, each pose heading to
    the next; a path in another frame than odom is refused, not guessed at."""
    ns = TypestoreMessages()
    angles = np.linspace(0.0, 1.5, 30)
    path = np.stack([20 * np.sin(angles), 20 - 20 * np.cos(angles)], axis=-1) + [100.0, -7.0]
    msg = route_to_msg(ns, 1_500_000_000, path, "odom")
    assert msg.header.frame_id == "odom" and len(msg.poses) == 30
    stamp, got = route_from_msg(msg, "odom")
    assert stamp == 1_500_000_000
    np.testing.assert_allclose(got, path)
    q = msg.poses[0].pose.orientation
    assert math.atan2(2 * q.w * q.z, 1 - 2 * q.z * q.z) == pytest.approx(
        math.atan2(*(path[1] - path[0])[::-1]), abs=1e-9
    )
    with pytest.raises(ValueError, match="frame 'map'"):
        route_from_msg(route_to_msg(ns, 1, path, "map"), "odom")


def test_rollout_markers_delete_all_when_count_shrinks() -> None:
    pub = RolloutMarkerPublisher()
    rollouts = np.random.default_rng(0).normal(size=(4, 5, 2))
    first = pub.to_msg(NS, rollouts, 7)
    line_strip = NS.constant("visualization_msgs/msg/Marker", "LINE_STRIP")
    assert [m.type for m in first.markers] == [line_strip] * 4
    assert [m.id for m in first.markers] == [0, 1, 2, 3]
    assert len(first.markers[0].points) == 6  # origin + 5 waypoints
    assert first.markers[2].points[3].x == pytest.approx(rollouts[2, 2, 0])
    same = pub.to_msg(NS, rollouts, 8)
    assert len(same.markers) == 4
    fewer = pub.to_msg(NS, rollouts[:2], 9)
    delete_all = NS.constant("visualization_msgs/msg/Marker", "DELETEALL")
    assert [m.action for m in fewer.markers] == [delete_all, 0, 0]
    assert pub.num_published == 2
    with pytest.raises(ValueError, match=r"\(N, P, 2\)"):
        pub.to_msg(NS, np.zeros((5, 2)), 10)


def _plan() -> Plan:
    objects = {k: k == "pedestrian" for k in CRITICAL_OBJECT_KEYS}
    answer = DrivingAnswer(
        critical_objects=objects,
        explanation="pedestrian ahead, slowing",
        longitudinal=Longitudinal.DECELERATE,
        lateral=Lateral.LANE_FOLLOW,
        waypoints=np.arange(10.0).reshape(5, 2),
    )
    return Plan(
        stamp_ns=42,
        answer=answer,
        rollouts=np.zeros((3, 5, 2)),
        timings_ms={"prefill": 12.5},
        num_forwards=9,
    )


def test_reasoning_is_json() -> None:
    msg = reasoning_to_msg(NS, _plan(), {"latency_ms": 30.0})
    record = json.loads(msg.data)
    assert record["critical_objects"]["pedestrian"] is True
    assert record["meta_behavior"] == {"longitudinal": "decelerate", "lateral": "lane_follow"}
    assert record["num_rollouts"] == 3 and record["latency_ms"] == 30.0
    assert record["timings_ms"] == {"prefill": 12.5}


class _Status(NamedTuple):
    name: str
    level: int
    message: str
    hardware_id: str
    values: dict


def test_diagnostics_round_trip() -> None:
    statuses = [
        _Status("blockplan: control loop", 0, "ok", "planner", {"ticks": 10, "p50_ms": 12.3456789}),
        _Status("blockplan: camera front", 1, "stale", "front", {"age_s": 0.4}),
    ]
    msg = diagnostics_to_msg(NS, 99, statuses)
    back = diagnostics_from_msg(
        NS.typestore.deserialize_cdr(
            NS.typestore.serialize_cdr(msg, msg.__msgtype__), msg.__msgtype__
        )
    )
    assert back[0]["values"] == {"ticks": "10", "p50_ms": "12.3457"}
    assert [s["level"] for s in back] == [0, 1]
    with pytest.raises(ValueError, match="level 7"):
        diagnostics_to_msg(NS, 0, [_Status("x", 7, "", "", {})])


def test_typestore_namespace_rejects_unknown_fields() -> None:
    with pytest.raises(MessageFieldError, match="no field 'colour'"):
        NS.make("std_msgs/msg/ColorRGBA", colour=1)
    with pytest.raises(MessageFieldError, match="unknown message type"):
        NS.make("nope_msgs/msg/Nothing")
    with pytest.raises(MessageFieldError, match="needs 36 values"):
        NS.make("geometry_msgs/msg/PoseWithCovariance", covariance=np.zeros(3))


class _RosidlStatus:
    """Mimics a rosidl-generated class (what rclpy hands out): typed fields, kwargs init."""

    OK = b"\x00"
    _TYPES = {"level": "octet", "name": "string", "data": "sequence<uint8>", "cov": "double[2]"}

    @classmethod
    def get_fields_and_field_types(cls) -> dict[str, str]:
        return dict(cls._TYPES)

    def __init__(self, **kwargs) -> None:
        for k in kwargs:
            assert k in self._TYPES, k
        self.level = kwargs.get("level", b"\x00")
        self.name = kwargs.get("name", "")
        self.data = kwargs.get("data", array.array("B"))
        self.cov = kwargs.get("cov", np.zeros(2))


def test_module_namespace_coerces_to_rosidl_types() -> None:
    ns = ModuleMessages(resolve=lambda msgtype: _RosidlStatus)
    msg = ns.make("x/msg/S", level=2, name="n", data=np.arange(3, dtype=np.uint8), cov=[1, 2])
    assert msg.level == b"\x02"
    assert isinstance(msg.data, array.array) and list(msg.data) == [0, 1, 2]
    assert msg.cov.dtype == np.float64
    assert ns.constant("x/msg/S", "OK") == 0
    with pytest.raises(MessageFieldError, match="no field 'bogus'"):
        ns.make("x/msg/S", bogus=1)
    with pytest.raises(MessageFieldError, match="cannot import"):
        ModuleMessages().make("no_such_pkg_msgs/msg/Thing")
