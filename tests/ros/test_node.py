"""PlannerNode under rclpy: lifecycle transitions, images + odometry in, a Path at about the
control rate out. Skipped where rclpy is missing (marked `ros`)."""

from __future__ import annotations

import gc
import json
import threading
import time

import numpy as np
import pytest

from tests.optional import importorskip

pytestmark = pytest.mark.ros
rclpy = importorskip("rclpy")

from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from blockplan.bags import (
    ModuleMessages,
    beside_to_msg,
    ego_to_odometry,
    encode_image,
    lane_pose_to_msg,
    lead_to_msg,
    route_to_msg,
)
from blockplan.ros.interfaces import CAMERA_QOS
from blockplan.ros.node import PlannerNode
from blockplan.types import EgoState

RATE_HZ = 10.0
SPEED = 5.0
# The lanes beside: one lane to the left with a car 14.5 m ahead at 6 m/s, none to the right;
# the runtime keeps no speed for a car that is not there.
BESIDE = np.array([[1.0, 14.5, 6.0, np.inf, 0.0], [0.0, np.inf, 0.0, np.inf, 0.0]])
# The router's path: straight on along odom's x, 1 m to the left of the ego's line.
ROUTE = np.stack([np.arange(-10.0, 200.0, 2.0), np.ones(105)], axis=-1)
BESIDE_KEPT = np.array([[1.0, 14.5, 6.0, np.inf, np.nan], [0.0, np.inf, np.nan, np.inf, np.nan]])


@pytest.fixture
def context():
    ctx = Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def _planner(context, **overrides) -> PlannerNode:
    params = {
        "model.dir": "constant-velocity",
        "cameras.names": ["front"],
        "control.rate_hz": RATE_HZ,
        **overrides,
    }
    return PlannerNode(
        context=context,
        parameter_overrides=[Parameter(name, value=value) for name, value in params.items()],
    )


class Vehicle(Node):
    """Publishes a camera at 20 Hz, odometry, the lane pose and the car ahead at 50 Hz
    (stamped now, driving at SPEED, 0.4 m left of the lane centre, a car 35 m ahead at
    12 m/s) and records what the planner publishes."""

    def __init__(self, context) -> None:
        super().__init__("fake_vehicle", context=context)
        self.ns = ModuleMessages()
        cls = self.ns.message_class
        self.image_pub = self.create_publisher(
            cls("sensor_msgs/msg/Image"), "camera/front/image_raw", CAMERA_QOS
        )
        self.odom_pub = self.create_publisher(cls("nav_msgs/msg/Odometry"), "odom", 10)
        self.lane_pub = self.create_publisher(
            cls("geometry_msgs/msg/PoseStamped"), "localization/lane_pose", 10
        )
        self.lead_pub = self.create_publisher(
            cls("nav_msgs/msg/Odometry"), "perception/lead_vehicle", 10
        )
        self.beside_pub = self.create_publisher(
            cls("std_msgs/msg/Float64MultiArray"), "perception/lanes_beside", 10
        )
        self.route_pub = self.create_publisher(cls("nav_msgs/msg/Path"), "planning/route", 10)
        self.paths: list[tuple[float, object]] = []
        self.reasoning: list[dict] = []
        self.diagnostics: list[object] = []
        self.create_subscription(
            cls("nav_msgs/msg/Path"),
            "planning/trajectory",
            lambda m: self.paths.append((time.monotonic(), m)),
            10,
        )
        self.create_subscription(
            cls("std_msgs/msg/String"),
            "planning/reasoning",
            lambda m: self.reasoning.append(json.loads(m.data)),
            10,
        )
        self.create_subscription(
            cls("diagnostic_msgs/msg/DiagnosticArray"),
            "/diagnostics",
            self.diagnostics.append,
            10,
        )
        self.image = np.full((48, 64, 3), 90, np.uint8)
        self.start_ns = self.now_ns()
        self.create_timer(0.05, self.publish_image)
        self.create_timer(0.02, self.publish_odometry)
        self.create_timer(0.5, self.publish_route)  # a router's rate, not odometry's

    def now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def publish_image(self) -> None:
        self.image_pub.publish(encode_image(self.ns, self.image, self.now_ns(), "front"))

    def publish_odometry(self) -> None:
        now = self.now_ns()
        ego = EgoState(now, x=SPEED * (now - self.start_ns) * 1e-9, y=0.0, yaw=0.0, v_x=SPEED)
        self.odom_pub.publish(ego_to_odometry(self.ns, ego))
        self.lane_pub.publish(lane_pose_to_msg(self.ns, now, 0.4, -0.02))
        self.lead_pub.publish(lead_to_msg(self.ns, now, 35.0, 12.0, "base_link"))
        self.beside_pub.publish(beside_to_msg(self.ns, BESIDE))

    def publish_route(self) -> None:
        self.route_pub.publish(route_to_msg(self.ns, self.now_ns(), ROUTE, "odom"))


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _spin(context, nodes):
    executor = MultiThreadedExecutor(context=context)
    for node in nodes:
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return executor, thread


def test_active_node_publishes_a_path_at_the_control_rate(context):
    planner, vehicle = _planner(context), Vehicle(context)
    executor, thread = _spin(context, [planner, vehicle])
    try:
        assert planner.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert planner.trigger_activate() == TransitionCallbackReturn.SUCCESS
        # what activation loaded is out of the cyclic collector's full passes (~200 ms with
        # the GIL held over such a heap), and back in once deactivated
        assert gc.get_freeze_count() > 0
        time.sleep(1.0)  # windows fill, the first plans arrive
        start = time.monotonic()
        time.sleep(3.0)
        window = [m for t, m in vehicle.paths if t >= start]
        assert 0.6 * 3.0 * RATE_HZ <= len(window) <= 1.4 * 3.0 * RATE_HZ
        path = window[-1]
        assert path.header.frame_id == "base_link"
        assert abs(_ns(path.header.stamp) - vehicle.now_ns()) < 1e9  # stamped at its tick
        assert len(path.poses) == 20
        assert path.poses[-1].pose.position.x > 0.5 * SPEED * 5.0  # driving on, not stopping
        assert vehicle.reasoning and "constant velocity" in vehicle.reasoning[-1]["explanation"]
        names = {s.name for msg in vehicle.diagnostics for s in msg.status}
        assert {"blockplan: model", "blockplan: control loop"} <= names
        # The lane pose reaches the runtime (models whose encoder reads it get it).
        stamp, pose = planner._runtime.lane_poses.newest()
        assert stamp > vehicle.start_ns and pose == pytest.approx((0.4, -0.02))
        stamp, lead = planner._runtime.leads.newest()  # and the car ahead likewise
        assert stamp > vehicle.start_ns and lead == pytest.approx((35.0, 12.0))
        # and the lanes beside, stamped on arrival with the node's clock
        stamp, beside = planner._runtime.besides.newest()
        assert stamp > vehicle.start_ns
        np.testing.assert_array_equal(np.asarray(beside), BESIDE_KEPT)
        stamp, route = planner._runtime.routes.newest()  # and the router's path, in odom
        assert stamp > vehicle.start_ns
        np.testing.assert_allclose(route, ROUTE)

        assert planner.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        deactivated_ns = planner.get_clock().now().nanoseconds
        assert gc.get_freeze_count() == 0
        time.sleep(1.3)
        # No ticks while inactive: every path is stamped at its tick, and the last tick ended
        # before the transition returned (a busy executor may still deliver earlier paths late).
        stamps = [_ns(m.header.stamp) for _, m in vehicle.paths]
        assert len(stamps) > len(window) and max(stamps) <= deactivated_ns
        assert planner.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert planner.trigger_shutdown() == TransitionCallbackReturn.SUCCESS
    finally:
        executor.shutdown()
        thread.join(timeout=5.0)
        planner.destroy_node()
        vehicle.destroy_node()


@pytest.mark.parametrize(
    "overrides",
    [
        {"control.rate_hz": -1.0},  # the config rejects it
        {"rollouts.num_rollouts": 100},  # outside the descriptor's range
        {"contrl.rate_hz": 5.0},  # a typo: not a config field
        {"decoding.strategy": "beam"},  # not a choice
    ],
)
def test_bad_parameters_fail_configure_without_raising(context, overrides):
    planner = _planner(context, **overrides)
    try:
        assert planner.trigger_configure() == TransitionCallbackReturn.FAILURE
    finally:
        planner.destroy_node()


def test_a_missing_model_fails_activate_and_the_node_stays_inactive(context, tmp_path):
    planner = _planner(context, **{"model.dir": str(tmp_path / "no_model")})
    try:
        assert planner.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert planner.trigger_activate() == TransitionCallbackReturn.FAILURE
        assert planner.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    finally:
        planner.destroy_node()


def test_invalid_parameter_changes_are_rejected(context):
    planner = _planner(context)
    try:
        assert planner.trigger_configure() == TransitionCallbackReturn.SUCCESS
        bad = planner.set_parameters([Parameter("trajectory.dt", value=9.0)])[0]
        assert not bad.successful and "trajectory.dt" in bad.reason
        good = planner.set_parameters([Parameter("trajectory.dt", value=0.5)])[0]
        assert good.successful
        read_only = planner.set_parameters([Parameter("model.dir", value="elsewhere")])[0]
        assert not read_only.successful
    finally:
        planner.destroy_node()


def test_a_transition_the_state_does_not_have_is_refused_not_raised(context):
    """rclpy raises out of change_state for a transition id the current state lacks (the
    executor then ends the process); the node answers success=False and stays put."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    node = _planner(context)
    try:
        service = next(s for s in node.services if s.srv_type is ChangeState)
        request = ChangeState.Request()
        request.transition.id = Transition.TRANSITION_ACTIVATE  # from unconfigured: none
        assert service.callback(request, ChangeState.Response()).success is False
        assert node._state_machine.current_state[1] == "unconfigured"
        request.transition.id = Transition.TRANSITION_CONFIGURE
        assert service.callback(request, ChangeState.Response()).success is True
        assert node._state_machine.current_state[1] == "inactive"
    finally:
        node.destroy_node()
