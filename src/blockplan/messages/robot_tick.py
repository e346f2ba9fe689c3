"""What the robot node publishes per tick (docs/RUNTIME.md "Robots"), ROS-free.

Meta-World's actions are end-effector position deltas and a gripper effort, not joint targets,
so the per-tick command goes out the way a servo stack consumes it:

* `robot.twist_topic` (`/servo_node/delta_twist_cmds`) — geometry_msgs/TwistStamped in
  `robot.command_frame`: linear = action[:3] · `robot.velocity_per_unit` m/s (Meta-World moves
  the hand 1 cm per unit per 12.5 ms step: 0.8 m/s), angular zero. MoveIt Servo reads this
  message on this topic by default. The hold fallback publishes zero velocity.
* `robot.gripper_topic` (`/gripper/command`) — std_msgs/Float64, the gripper effort action[3]
  in [-1, 1] (−1 open, 1 closed).
* `robot.chunk_topic` (`/planning/action_chunk`) — every new chunk, once, as
  trajectory_msgs/JointTrajectory: header stamp = the chunk's observation time t0, one
  "joint" per action channel (`dx`, `dy`, `dz`, `grip`), point k = step k at t0 +
  k·`robot.chunk_period_s` with the raw action values as positions (for recording and
  inspection; a controller consumes the twist).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.planning import diagnostics_to_msg
from blockplan.bags.stamps import make_header
from blockplan.config import PlannerConfig
from blockplan.types import ActionPlan

TWIST, GRIPPER, CHUNK = "twist", "gripper", "chunk"
ACTION_CHANNELS = ("dx", "dy", "dz", "grip")


def twist_command(
    ns: MessageNamespace, action: np.ndarray, stamp_ns: int, frame_id: str, per_unit: float
) -> Any:
    v = np.asarray(action[:3], dtype=np.float64) * per_unit
    linear = ns.make("geometry_msgs/msg/Vector3", x=float(v[0]), y=float(v[1]), z=float(v[2]))
    twist = ns.make("geometry_msgs/msg/Twist", linear=linear)
    return ns.make(
        "geometry_msgs/msg/TwistStamped", header=make_header(ns, stamp_ns, frame_id), twist=twist
    )


def chunk_to_joint_trajectory(
    ns: MessageNamespace, plan: ActionPlan, period_s: float, frame_id: str
) -> Any:
    actions = np.asarray(plan.actions, dtype=np.float64)
    names = list(ACTION_CHANNELS[: actions.shape[1]])
    names += [f"a{d}" for d in range(len(names), actions.shape[1])]
    points = []
    for k, row in enumerate(actions):
        ns_from_start = round(k * period_s * 1e9)
        duration = ns.make(
            "builtin_interfaces/msg/Duration",
            sec=ns_from_start // 1_000_000_000,
            nanosec=ns_from_start % 1_000_000_000,
        )
        points.append(
            ns.make(
                "trajectory_msgs/msg/JointTrajectoryPoint", positions=row, time_from_start=duration
            )
        )
    return ns.make(
        "trajectory_msgs/msg/JointTrajectory",
        header=make_header(ns, plan.stamp_ns, frame_id),
        joint_names=names,
        points=points,
    )


class RobotTickMessages:
    """Turns `RobotTick`s into (publisher key, message) pairs."""

    def __init__(self, ns: MessageNamespace, config: PlannerConfig) -> None:
        self.ns, self.robot = ns, config.robot

    def tick(self, out: Any) -> list[tuple[str, Any]]:
        r = self.robot
        messages = [
            (
                TWIST,
                twist_command(
                    self.ns, out.action, out.now_ns, r.command_frame, r.velocity_per_unit
                ),
            ),
            (GRIPPER, self.ns.make("std_msgs/msg/Float64", data=float(out.action[-1]))),
        ]
        for plan in out.new_chunks:
            messages.append(
                (CHUNK, chunk_to_joint_trajectory(self.ns, plan, r.chunk_period_s, r.command_frame))
            )
        return messages

    def diagnostics(self, statuses: Any, stamp_ns: int) -> Any:
        return diagnostics_to_msg(self.ns, stamp_ns, statuses)
