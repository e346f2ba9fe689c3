"""The robot node in a live ROS 2 graph (launch/robot.launch.py, params/robot.yaml, the shipped
robot model) on wall time: a robot bag's cameras, /joint_states and /instruction are played
restamped to now (`blockplan play --restamp`); the node publishes the stitched action as
TwistStamped (+ the gripper as Float64) at the 30 Hz control rate and each chunk as a
JointTrajectory, reports on /diagnostics, and holds position (zero velocity) once the inputs
stop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.ros.live import STARTUP_TIMEOUT_S, assert_clean_exit, wait_until

pytestmark = pytest.mark.ros

RATE_HZ = 30.0
INPUTS = ["/camera/front/image_raw", "/camera/wrist/image_raw", "/joint_states", "/instruction"]


@pytest.fixture(scope="module")
def robot_bag(tmp_path_factory) -> Path:
    """4 s of a robot episode (80 Hz joints, 20 Hz cameras), written by robot_bag.py."""
    from blockplan.sim.manipulation import Demonstration
    from blockplan.sim.robot_bag import write_demo_bag

    rng = np.random.default_rng(0)
    T = 320
    joints = np.tile([1.89, -0.58, -0.98, 1.64, 0.94, 1.04, 2.29, 0.0, 0.0], (T, 1))
    joints[:, 0] += np.linspace(0, 0.05, T)
    frames = {
        t: {c: rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for c in ("front", "wrist")}
        for t in range(0, T, 4)
    }
    demo = Demonstration(
        "reach",
        0,
        "reach the red goal marker",
        joints,
        np.zeros_like(joints),
        np.zeros((T, 4)),
        frames,
        True,
        T,
    )
    path = tmp_path_factory.mktemp("robot") / "robot.mcap"
    write_demo_bag(demo, path)
    return path


class RobotWatch:
    """The robot node's outputs as seen by a node of the test process (own context)."""

    def __init__(self, domain_id: int) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        from blockplan.bags import ModuleMessages, diagnostics_from_msg, header_stamp_ns
        from blockplan.ros.observer import OBSERVER_QOS

        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = Node("blockplan_robot_observer", context=self.context)
        ns = ModuleMessages()
        self.twist, self.gripper, self.chunks, self.diagnostics = [], [], [], []

        def on_twist(msg):
            lin = msg.twist.linear
            self.twist.append(
                (time.time(), header_stamp_ns(msg), msg.header.frame_id, (lin.x, lin.y, lin.z))
            )

        def on_chunk(msg):
            self.chunks.append(
                (
                    header_stamp_ns(msg),
                    list(msg.joint_names),
                    len(msg.points),
                    [list(p.positions) for p in msg.points],
                )
            )

        def on_diagnostics(msg):
            self.diagnostics.append((time.time(), diagnostics_from_msg(msg)))

        subs = [
            ("geometry_msgs/msg/TwistStamped", "/servo_node/delta_twist_cmds", on_twist),
            ("std_msgs/msg/Float64", "/gripper/command", lambda m: self.gripper.append(m.data)),
            ("trajectory_msgs/msg/JointTrajectory", "/planning/action_chunk", on_chunk),
            ("diagnostic_msgs/msg/DiagnosticArray", "/diagnostics", on_diagnostics),
        ]
        self.subs = [
            self.node.create_subscription(ns.message_class(t), topic, cb, OBSERVER_QOS)
            for t, topic, cb in subs
        ]
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def close(self) -> None:
        import rclpy

        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=5.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def _statuses(diagnostics, since: float, until: float) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for wall, statuses in diagnostics:
        if since <= wall < until:
            for s in statuses:
                out.setdefault(s["name"], []).append(s)
    return out


def test_robot_node_publishes_the_chunk_at_30_hz_and_holds_without_inputs(graph, robot_bag):
    launch = graph.start("launch", ["ros2", "launch", "blockplan", "robot.launch.py"])
    launch.wait_output("active:", STARTUP_TIMEOUT_S)
    w = RobotWatch(graph.domain_id)
    try:
        assert wait_until(lambda: len(w.twist) > 10, 20.0), launch.output[-3000:]
        play = graph.play(robot_bag, "--restamp", "--topics", *INPUTS, "--wait-for", *INPUTS)
        play.popen.wait(timeout=60)
        assert play.popen.returncode == 0, play.output[-3000:]
        ended = time.time()
        time.sleep(2.5)
        twist, chunks, diagnostics = list(w.twist), list(w.chunks), list(w.diagnostics)
    finally:
        w.close()
    assert launch.alive()
    launch.interrupt()
    assert_clean_exit(launch.output)

    # The command goes out at the control rate throughout: before, during and after the bag.
    times = [t for t, *_ in twist]
    span = times[-1] - times[0]
    assert abs((len(times) - 1) / span - RATE_HZ) <= 0.1 * RATE_HZ, (len(times), span)
    assert all(frame == "world" for _, _, frame, _ in twist)
    # Chunks came while the bag played: H = 8 steps of the 4 action channels.
    assert chunks, launch.output[-3000:]
    stamp, names, num_points, positions = chunks[0]
    assert names == ["dx", "dy", "dz", "grip"] and num_points == 8
    assert np.all(np.abs(np.asarray(positions)) <= 1.0 + 1e-6)
    # After the inputs stop: hold position (zero velocity), said on /diagnostics.
    late = [v for t, _, _, v in twist if t > ended + 1.0]
    assert late and all(v == (0.0, 0.0, 0.0) for v in late)
    after = _statuses(diagnostics, ended + 1.0, ended + 3.0)
    loop = after["blockplan: control loop"]
    assert all(s["level"] == 1 and s["message"].startswith("holding position") for s in loop)
    assert all(s["level"] == 1 for s in after["blockplan: joint states"])
    model = after["blockplan: model"][0]
    assert model["level"] == 0 and "blockplan-robot-tiny" in model["message"]
