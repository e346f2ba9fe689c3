"""Write a recorded episode as a real ROS 2 bag (rosbags, via `blockplan.bags`).

Per simulation step (20 Hz): /odom, /tf (odom -> base_link), the ego's pose in its lane
(/localization/lane_pose, what a localisation on the map provides; `lane_pose_to_msg`) and
the car ahead in its lane (/perception/lead_vehicle, what a tracker or an ACC radar
provides; `lead_to_msg`) and the lanes beside (/perception/lanes_beside: the map's lane
count and the tracker's nearest cars in the lane lines beside; `beside_to_msg`). Per camera
tick (rig rate):
one image per camera (sensor_msgs/Image rgb8, or CompressedImage jpeg) in the camera's
optical frame, the route command, the route ahead as a router would publish it
(/planning/route: nav_msgs/Path in odom; `route_to_msg`), and the ground truth at that instant: the expert's
20-point 4 Hz future as nav_msgs/Path in base_link at t0, and the label JSON
(`label_to_json`). /tf_static holds base_link -> camera_<name> and camera_<name>_optical.
Topic names: `blockplan.sim.topics`. Stamps are `start_ns` + simulation time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from blockplan.bags import (
    BagWriter,
    StaticFrame,
    TypestoreMessages,
    beside_to_msg,
    ego_to_odometry,
    ego_to_tf,
    encode_compressed_image,
    encode_image,
    lane_pose_to_msg,
    lead_to_msg,
    route_to_msg,
    static_frames_to_tf,
    string_msg,
    trajectory_to_path,
)
from blockplan.errors import UserError
from blockplan.schema import default_schema, render_answer_text
from blockplan.sim.episode import EpisodeLog
from blockplan.sim.labels import (
    HORIZON_S,
    SampleLabel,
    ego_state,
    label_at,
    log_lanes_beside,
    log_lead,
)
from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import Rig
from blockplan.sim.scenarios import SIM_HZ
from blockplan.sim.topics import (
    BASE_FRAME,
    BESIDE_TOPIC,
    GT_LABELS_TOPIC,
    GT_PATH_TOPIC,
    LANE_POSE_TOPIC,
    LEAD_TOPIC,
    ODOM_FRAME,
    ODOM_TOPIC,
    ROUTE_COMMAND_TOPIC,
    ROUTE_TOPIC,
    TF_STATIC_TOPIC,
    TF_TOPIC,
    camera_topic,
)
from blockplan.types import Trajectory

DEFAULT_START_NS = 1_700_000_000 * 1_000_000_000  # a fixed, realistic epoch for the stamps


class SimBagError(UserError, ValueError):
    """The episode cannot be written as asked (too short, camera rate not a divisor...)."""


@dataclass(frozen=True)
class BagSummary:
    path: str
    storage: str
    duration_s: float
    message_counts: dict[str, int]


def rpy_from_matrix(R: np.ndarray) -> tuple[float, float, float]:
    """Roll, pitch, yaw (fixed axes x, y, z) of a rotation matrix R = Rz Ry Rx."""
    pitch = math.asin(max(-1.0, min(1.0, -float(R[2, 0]))))
    return math.atan2(R[2, 1], R[2, 2]), pitch, math.atan2(R[1, 0], R[0, 0])


def camera_static_frames(rig: Rig) -> list[StaticFrame]:
    frames = []
    for c in rig.cameras:
        xyz = (c.x, c.y, c.z)
        frames.append(StaticFrame(c.frame_id, xyz, (c.roll, c.pitch, c.yaw)))
        frames.append(StaticFrame(c.optical_frame_id, xyz, rpy_from_matrix(c.R_base_from_optical)))
    return frames


def label_trajectory(label: SampleLabel, stamp_ns: int) -> Trajectory:
    """The label's 4 Hz future as a Trajectory in base_link at t0."""
    xy = np.concatenate([[[0.0, 0.0]], label.future_xy])  # (21, 2) with the origin at t0
    ds = np.maximum(np.hypot(*np.diff(xy, axis=0).T), 1e-6)  # (20,)
    yaw = np.concatenate([[0.0], label.future_yaw])
    curvature = np.where(ds > 0.05, np.diff(yaw) / ds, 0.0)
    accel = np.gradient(label.future_speed, label.future_t)
    return Trajectory(
        stamp_ns=stamp_ns,
        t=label.future_t,
        x=label.future_xy[:, 0],
        y=label.future_xy[:, 1],
        yaw=label.future_yaw,
        speed=label.future_speed,
        accel=accel,
        curvature=curvature,
    )


def label_to_json(label: SampleLabel, log: EpisodeLog, stamp_ns: int) -> dict[str, Any]:
    """The ground-truth record: the answer (typed fields and the schema's answer text), the
    4 Hz future, the route command and the facts behind the explanation."""
    a = label.answer
    return {
        "stamp_ns": stamp_ns,
        "scenario": log.scenario,
        "seed": log.seed,
        "answer": {
            "critical_objects": {k: bool(v) for k, v in a.critical_objects.items()},
            "explanation": a.explanation,
            "longitudinal": a.longitudinal.value,
            "lateral": a.lateral.value,
            "waypoints": np.round(a.waypoints, 3).tolist(),
        },
        "answer_text": render_answer_text(a, default_schema()),
        "future": {
            "t": label.future_t.tolist(),
            "xy": np.round(label.future_xy, 3).tolist(),
            "yaw": np.round(label.future_yaw, 4).tolist(),
            "speed": np.round(label.future_speed, 3).tolist(),
        },
        "route_command": label.route_command,
        "facts": label.facts,
    }


def write_episode_bag(
    log: EpisodeLog,
    rig: Rig,
    out: str | Path,
    duration_s: float,
    storage: str = "mcap",
    compressed: bool = False,
    start_ns: int = DEFAULT_START_NS,
    fits: Any = None,
    progress: bool = False,
) -> BagSummary:
    """Write [0, duration_s] of `log` (which must hold duration_s + 5 s for the labels)."""
    if log.duration + 1e-6 < duration_s + HORIZON_S:
        raise SimBagError(
            f"duration={duration_s}: the log holds {log.duration:.2f} s, labels need "
            f"duration + {HORIZON_S} s"
        )
    camera_every = SIM_HZ / rig.rate_hz
    if abs(camera_every - round(camera_every)) > 1e-9:
        raise SimBagError(f"rig.rate_hz={rig.rate_hz}: must divide the {SIM_HZ} Hz sim rate")
    camera_every = round(camera_every)
    ns = TypestoreMessages()
    renderer = RigRenderer(rig, log.road)
    counts: dict[str, int] = {}
    last = log.index_at(duration_s)

    def put(bag: BagWriter, topic: str, msg: Any, stamp: int) -> None:
        bag.write(topic, msg, stamp)
        counts[topic] = counts.get(topic, 0) + 1

    with BagWriter(out, storage=storage) as bag:
        put(
            bag,
            TF_STATIC_TOPIC,
            static_frames_to_tf(ns, camera_static_frames(rig), start_ns, BASE_FRAME),
            start_ns,
        )
        for i in tqdm(range(last + 1), desc="simulate", unit="step", disable=not progress):
            ego = ego_state(log, i)
            ego = dataclasses.replace(ego, stamp_ns=start_ns + ego.stamp_ns)
            stamp = ego.stamp_ns
            put(bag, ODOM_TOPIC, ego_to_odometry(ns, ego, ODOM_FRAME, BASE_FRAME), stamp)
            put(bag, TF_TOPIC, ego_to_tf(ns, ego, ODOM_FRAME, BASE_FRAME), stamp)
            if log.lane_pose is not None and np.isfinite(log.lane_pose[i]).all():
                offset, heading = (float(v) for v in log.lane_pose[i])
                put(bag, LANE_POSE_TOPIC, lane_pose_to_msg(ns, stamp, offset, heading), stamp)
            gap, speed = log_lead(log, i)
            put(bag, LEAD_TOPIC, lead_to_msg(ns, stamp, gap, speed, BASE_FRAME), stamp)
            put(bag, BESIDE_TOPIC, beside_to_msg(ns, log_lanes_beside(log, i)), stamp)
            if i % camera_every:
                continue
            images = renderer.render(log.snapshot(i))
            for cam in rig.cameras:
                topic = camera_topic(cam.name, compressed)
                encode = encode_compressed_image if compressed else encode_image
                put(bag, topic, encode(ns, images[cam.name], stamp, cam.optical_frame_id), stamp)
            label = label_at(log, float(log.t[i]), fits=fits)
            put(bag, ROUTE_COMMAND_TOPIC, string_msg(ns, label.route_command), stamp)
            if log.route_path is not None and len(log.route_path[i]) >= 2:
                put(bag, ROUTE_TOPIC, route_to_msg(ns, stamp, log.route_path[i], ODOM_FRAME), stamp)
            path = trajectory_to_path(ns, label_trajectory(label, stamp), BASE_FRAME)
            put(bag, GT_PATH_TOPIC, path, stamp)
            record = json.dumps(label_to_json(label, log, stamp), separators=(",", ":"))
            put(bag, GT_LABELS_TOPIC, string_msg(ns, record), stamp)
    return BagSummary(str(out), storage, float(log.t[last]), counts)
