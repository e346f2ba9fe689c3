"""Robot demonstrations as real ROS 2 bags, and back (docs/SIM.md "Robots").

One bag per episode (mcap), stamps `start_ns` + step · CONTROL_PERIOD_S:

    /instruction                      std_msgs/String         once, at the start
    /joint_states                     sensor_msgs/JointState  every control step (80 Hz)
    /camera/<name>/image_raw          sensor_msgs/Image rgb8  every rendered step
    /servo_node/delta_twist_cmds      geometry_msgs/TwistStamped   the commanded end-effector
                                      velocity, action[:3] · ACTION_SCALE / CONTROL_PERIOD_S m/s
                                      in `world`, every control step
    /gripper/command                  std_msgs/Float64        action[3] (−1 open … 1 closed)
    /episode/info                     std_msgs/String         JSON {task, seed, success,
                                      success_step, render_every, ...}, at the end
    /sim/object/position              geometry_msgs/PointStamped   the object's, the goal's
    /sim/goal/position                and the hand's positions in `world`, every control step:
    /sim/hand/position                the simulator's ground truth (as a motion-capture system
                                      would publish it), for the scene targets of training;
                                      optional (bags without the hand: its columns NaN)

The command topics are what the robot node publishes (docs/RUNTIME.md "Robots"), so a
recorded demonstration and a recorded policy run read the same way. `read_demo_bag` turns a
bag back into the arrays of one data-set episode: per control step the joints, the action,
and per camera the newest image at or before the step (a camera slower than the control
rate holds its last frame).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.bags import (
    BagWriter,
    TypestoreMessages,
    decode_image,
    encode_image,
    open_bag_reader,
    string_msg,
)
from blockplan.bags.stamps import header_stamp_ns, make_header
from blockplan.errors import UserError
from blockplan.sim.manipulation import (
    ACTION_SCALE,
    CONTROL_PERIOD_S,
    JOINT_NAMES,
    Demonstration,
)

INSTRUCTION_TOPIC = "/instruction"
JOINT_STATES_TOPIC = "/joint_states"
TWIST_TOPIC = "/servo_node/delta_twist_cmds"
GRIPPER_TOPIC = "/gripper/command"
EPISODE_INFO_TOPIC = "/episode/info"
OBJECT_TOPIC = "/sim/object/position"
GOAL_TOPIC = "/sim/goal/position"
HAND_TOPIC = "/sim/hand/position"
WORLD_FRAME = "world"
DEFAULT_START_NS = 1_700_000_000 * 1_000_000_000
VELOCITY_PER_UNIT = ACTION_SCALE / CONTROL_PERIOD_S  # m/s of end-effector velocity per unit


def camera_image_topic(name: str) -> str:
    return f"/camera/{name}/image_raw"


class RobotBagError(UserError, ValueError):
    """A robot bag that lacks what a demonstration needs."""


def twist_msg(ns: Any, action: np.ndarray, stamp_ns: int) -> Any:
    v = np.asarray(action[:3], dtype=np.float64) * VELOCITY_PER_UNIT
    linear = ns.make("geometry_msgs/msg/Vector3", x=float(v[0]), y=float(v[1]), z=float(v[2]))
    twist = ns.make("geometry_msgs/msg/Twist", linear=linear)
    return ns.make(
        "geometry_msgs/msg/TwistStamped", header=make_header(ns, stamp_ns, WORLD_FRAME), twist=twist
    )


def point_msg(ns: Any, xyz: np.ndarray, stamp_ns: int) -> Any:
    x, y, z = (float(v) for v in xyz)
    point = ns.make("geometry_msgs/msg/Point", x=x, y=y, z=z)
    return ns.make(
        "geometry_msgs/msg/PointStamped", header=make_header(ns, stamp_ns, WORLD_FRAME), point=point
    )


def twist_to_delta(msg: Any) -> np.ndarray:
    """TwistStamped → the action's (dx, dy, dz) in [-1, 1] units."""
    lin = msg.twist.linear
    return np.array([lin.x, lin.y, lin.z], dtype=np.float64) / VELOCITY_PER_UNIT


def joint_state_msg(ns: Any, joints: np.ndarray, velocities: np.ndarray, stamp_ns: int) -> Any:
    return ns.make(
        "sensor_msgs/msg/JointState",
        header=make_header(ns, stamp_ns, ""),
        name=list(JOINT_NAMES),
        position=np.asarray(joints, dtype=np.float64),
        velocity=np.asarray(velocities, dtype=np.float64),
        effort=np.zeros(0, dtype=np.float64),
    )


def joints_from_msg(msg: Any, names: tuple[str, ...] = JOINT_NAMES) -> np.ndarray:
    """JointState → positions in `names` order (any order and extra joints in the message);
    a missing joint raises RobotBagError."""
    index = {n: i for i, n in enumerate(msg.name)}
    missing = [n for n in names if n not in index]
    if missing:
        raise RobotBagError(f"JointState lacks joint {missing[0]!r} (has {list(msg.name)})")
    position = np.asarray(msg.position, dtype=np.float64)
    if len(position) != len(msg.name):
        raise RobotBagError(f"JointState: {len(msg.name)} names, {len(position)} positions")
    return np.array([position[index[n]] for n in names])


@dataclass(frozen=True)
class RobotBagSummary:
    path: str
    num_steps: int
    counts: dict[str, int]


def write_demo_bag(
    demo: Demonstration,
    out: str | Path,
    start_ns: int = DEFAULT_START_NS,
    extra: dict | None = None,
) -> RobotBagSummary:
    ns = TypestoreMessages()
    counts: dict[str, int] = {}
    period_ns = round(CONTROL_PERIOD_S * 1e9)
    render_steps = sorted(demo.frames)

    def put(bag: BagWriter, topic: str, msg: Any, stamp: int) -> None:
        bag.write(topic, msg, stamp)
        counts[topic] = counts.get(topic, 0) + 1

    with BagWriter(out, storage="mcap") as bag:
        put(bag, INSTRUCTION_TOPIC, string_msg(ns, demo.instruction), start_ns)
        for t in range(len(demo.actions)):
            stamp = start_ns + t * period_ns
            put(
                bag,
                JOINT_STATES_TOPIC,
                joint_state_msg(ns, demo.joints[t], demo.joint_velocities[t], stamp),
                stamp,
            )
            for name, image in demo.frames.get(t, {}).items():
                put(
                    bag,
                    camera_image_topic(name),
                    encode_image(ns, image, stamp, f"camera_{name}_optical"),
                    stamp,
                )
            put(bag, TWIST_TOPIC, twist_msg(ns, demo.actions[t], stamp), stamp)
            grip = ns.make("std_msgs/msg/Float64", data=float(demo.actions[t][3]))
            put(bag, GRIPPER_TOPIC, grip, stamp)
            if demo.scene is not None:
                put(bag, OBJECT_TOPIC, point_msg(ns, demo.scene[t, :3], stamp), stamp)
                put(bag, GOAL_TOPIC, point_msg(ns, demo.scene[t, 3:6], stamp), stamp)
                if demo.scene.shape[1] > 6:
                    put(bag, HAND_TOPIC, point_msg(ns, demo.scene[t, 6:9], stamp), stamp)
        info = {
            "task": demo.task,
            "seed": demo.seed,
            "success": demo.success,
            "success_step": demo.success_step,
            "num_steps": len(demo.actions),
            "render_steps": render_steps[:2],
            "control_period_s": CONTROL_PERIOD_S,
            **(extra or {}),
        }
        end = start_ns + (len(demo.actions) - 1) * period_ns
        put(bag, EPISODE_INFO_TOPIC, string_msg(ns, json.dumps(info)), end)
    return RobotBagSummary(str(out), len(demo.actions), counts)


@dataclass
class RecordedEpisode:
    """A robot bag as data-set arrays (one entry per control step)."""

    instruction: str
    stamp_ns: np.ndarray  # (T,)
    joints: np.ndarray  # (T, 9)
    actions: np.ndarray  # (T, 4)
    frames: np.ndarray  # (T, K, H, W, 3): per camera the newest image at or before the step
    camera_names: tuple[str, ...]
    info: dict[str, Any]
    # (T, 9) object, goal and hand positions, when the bag has the first two (hand NaN if absent)
    scene: np.ndarray | None = None


def read_demo_bag(
    path: str | Path, camera_names: tuple[str, ...] = ("front", "wrist")
) -> RecordedEpisode:
    """A demonstration (or a policy's run) bag → per-step arrays. Steps are the /joint_states
    messages; each step needs its command (twist and gripper at the same stamp) and, per
    camera, an image at or before it."""
    instruction, info = "", {}
    joints: dict[int, np.ndarray] = {}
    deltas: dict[int, np.ndarray] = {}
    grips: dict[int, float] = {}
    images: dict[str, list[tuple[int, np.ndarray]]] = {c: [] for c in camera_names}
    points: dict[str, dict[int, np.ndarray]] = {OBJECT_TOPIC: {}, GOAL_TOPIC: {}, HAND_TOPIC: {}}
    topics = [INSTRUCTION_TOPIC, JOINT_STATES_TOPIC, TWIST_TOPIC, GRIPPER_TOPIC, EPISODE_INFO_TOPIC]
    topics += [camera_image_topic(c) for c in camera_names]
    with open_bag_reader(path) as reader:
        topics += [t for t in points if t in reader.topics]
        missing = [t for t in topics[:4] if t not in reader.topics]
        missing += [
            camera_image_topic(c)
            for c in camera_names
            if camera_image_topic(c) not in reader.topics
        ]
        if missing:
            raise RobotBagError(f"{path}: no topic {missing[0]} (has {sorted(reader.topics)})")
        for record, msg in reader.messages(topics):
            if record.topic == INSTRUCTION_TOPIC:
                instruction = str(msg.data)
            elif record.topic == EPISODE_INFO_TOPIC:
                info = json.loads(msg.data)
            elif record.topic == JOINT_STATES_TOPIC:
                joints[header_stamp_ns(msg)] = joints_from_msg(msg)
            elif record.topic == TWIST_TOPIC:
                deltas[header_stamp_ns(msg)] = twist_to_delta(msg)
            elif record.topic == GRIPPER_TOPIC:
                grips[record.log_time_ns] = float(msg.data)
            elif record.topic in points:
                p = msg.point
                points[record.topic][header_stamp_ns(msg)] = np.array([p.x, p.y, p.z])
            else:
                name = record.topic.split("/")[2]
                images[name].append((header_stamp_ns(msg), decode_image(msg)))
    stamps = np.array(sorted(joints), dtype=np.int64)
    if len(stamps) == 0:
        raise RobotBagError(f"{path}: no joint states")
    lacking = [s for s in stamps if s not in deltas or s not in grips]
    if lacking:
        raise RobotBagError(f"{path}: no command at {lacking[0]} ns")
    frames = []
    for c in camera_names:
        seq = sorted(images[c], key=lambda x: x[0])
        if not seq or seq[0][0] > stamps[0]:
            raise RobotBagError(f"{path}: camera {c} has no image at or before the first step")
        when = np.array([s for s, _ in seq])
        pick = np.searchsorted(when, stamps, side="right") - 1
        frames.append(np.stack([seq[i][1] for i in pick]))
    actions = np.stack([np.append(deltas[s], grips[s]) for s in stamps])
    scene = None
    if all(s in points[t] for t in (OBJECT_TOPIC, GOAL_TOPIC) for s in stamps):
        unknown = np.full(3, np.nan)
        scene = np.stack(
            [
                np.concatenate(
                    [
                        points[OBJECT_TOPIC][s],
                        points[GOAL_TOPIC][s],
                        points[HAND_TOPIC].get(s, unknown),
                    ]
                )
                for s in stamps
            ]
        )
    return RecordedEpisode(
        instruction,
        stamps,
        np.stack([joints[s] for s in stamps]),
        actions,
        np.stack(frames, axis=1),
        tuple(camera_names),
        info,
        scene,
    )
