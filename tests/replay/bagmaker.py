"""Bags made by the tests: a car driving a gentle curve, four cameras, odometry, TF, with
switches for every robustness case of the replay."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blockplan.bags import (
    BagWriter,
    StaticFrame,
    TypestoreMessages,
    ego_to_odometry,
    ego_to_tf,
    encode_compressed_image,
    encode_image,
    static_frames_to_tf,
    trajectory_to_path,
)
from blockplan.sim.topics import camera_topic
from blockplan.types import EgoState, Trajectory

NS = TypestoreMessages()
CAMERAS = ("front_left", "front", "front_right", "rear")
START_NS = 1_700_000_000 * 10**9


@dataclass
class BagSpec:
    duration_s: float = 8.0
    rate_hz: float = 10.0
    speed: float = 8.0
    curvature: float = 0.01
    cameras: tuple[str, ...] = CAMERAS
    compressed: bool = False
    image_size: tuple[int, int] = (24, 32)
    silent_camera: str | None = None  # this camera stops after silent_after_s
    silent_after_s: float = 3.0
    corrupt_jpeg_at: set[int] = field(default_factory=set)  # frame indices (compressed only)
    bad_length_at: set[int] = field(default_factory=set)  # raw images with a short data
    unknown_encoding_at: set[int] = field(default_factory=set)
    nan_odometry_at: set[int] = field(default_factory=set)
    unstamped_image_at: set[int] = field(default_factory=set)  # header stamp left at 0
    corrupt_odometry_at: set[int] = field(default_factory=set)  # undecodable CDR payload
    zero_quaternion_at: set[int] = field(default_factory=set)  # odometry orientation 0,0,0,0
    duplicate_odometry_at: set[int] = field(default_factory=set)  # the message written twice
    unstamped_everything: bool = False  # every header stamp left at 0
    loop_after_s: float | None = None  # stamps jump back to the start (bag loop)
    with_tf: bool = True
    with_ground_truth: bool = False  # /ground_truth/future_path at every camera tick


def ego_at(t: float, spec: BagSpec) -> EgoState:
    """Constant speed on a circle of the given curvature, starting at the origin."""
    k, v = spec.curvature, spec.speed
    yaw = k * v * t
    x = math.sin(yaw) / k if k else v * t
    y = (1 - math.cos(yaw)) / k if k else 0.0
    return EgoState(START_NS + round(t * 1e9), x, y, yaw, v, yaw_rate=k * v)


def _image(i: int, cam: int, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 8 + i * 5) % 256, (yy * 8 + cam * 60) % 256, (xx + yy + i) % 256], -1)
    return img.astype(np.uint8)


def _future_path(t: float, spec: BagSpec):
    """The true future at t + 0.25 … 5 s in the ego frame at t, as nav_msgs/Path."""
    now = ego_at(t, spec)
    c, s = math.cos(now.yaw), math.sin(now.yaw)
    times = 0.25 * np.arange(1, 21)
    xs, ys = [], []
    for dt in times:
        future = ego_at(t + dt, spec)
        dx, dy = future.x - now.x, future.y - now.y
        xs.append(c * dx + s * dy)
        ys.append(-s * dx + c * dy)
    z = np.zeros(20)
    traj = Trajectory(now.stamp_ns, times, np.array(xs), np.array(ys), z, z, z, z)
    return trajectory_to_path(NS, traj)


def make_bag(path: Path, spec: BagSpec | None = None, storage: str = "mcap") -> Path:
    spec = spec or BagSpec()
    num = int(spec.duration_s * spec.rate_hz)
    with BagWriter(path, storage=storage) as bag:
        frames = [StaticFrame(f"camera_{c}", (1.5, 0.0, 1.5)) for c in spec.cameras]
        bag.write("/tf_static", static_frames_to_tf(NS, frames, START_NS), START_NS)
        for i in range(num):
            t = i / spec.rate_hz
            lap_t = t
            if spec.loop_after_s is not None and t >= spec.loop_after_s:
                lap_t = t - spec.loop_after_s
            ego = ego_at(lap_t, spec)
            log_time = START_NS + round(t * 1e9)  # the recorder's clock never goes back
            stamp = ego.stamp_ns
            if i in spec.nan_odometry_at:
                ego = EgoState(stamp, math.nan, ego.y, ego.yaw, math.inf)
            if spec.unstamped_everything:
                stamp = 0
                ego = EgoState(0, ego.x, ego.y, ego.yaw, ego.v_x, yaw_rate=ego.yaw_rate)
            odom = ego_to_odometry(NS, ego)
            if i in spec.zero_quaternion_at:
                q = odom.pose.pose.orientation
                q.x = q.y = q.z = q.w = 0.0
            if i in spec.corrupt_odometry_at:
                bag.write_raw("/odom", "nav_msgs/msg/Odometry", b"\x00\x01\x00\x00xx", log_time)
            else:
                bag.write("/odom", odom, log_time)
                if i in spec.duplicate_odometry_at:
                    bag.write("/odom", odom, log_time)
            if spec.with_tf and i not in spec.nan_odometry_at:
                bag.write("/tf", ego_to_tf(NS, ego), log_time)
            if spec.with_ground_truth:
                bag.write("/ground_truth/future_path", _future_path(lap_t, spec), log_time)
            for c, cam in enumerate(spec.cameras):
                if cam == spec.silent_camera and t >= spec.silent_after_s:
                    continue
                rgb = _image(i, c, spec.image_size)
                topic = camera_topic(cam)
                if spec.compressed:
                    msg = encode_compressed_image(NS, rgb, stamp, f"camera_{cam}", "jpeg")
                    if i in spec.corrupt_jpeg_at and c == 1:
                        msg.data = msg.data[: len(msg.data) // 3].copy()
                    topic += "/compressed"
                else:
                    msg = encode_image(NS, rgb, stamp, f"camera_{cam}", "bgr8", row_padding=4)
                    if i in spec.bad_length_at and c == 1:
                        msg.data = msg.data[:-7].copy()
                    if i in spec.unknown_encoding_at and c == 1:
                        msg.encoding = "bayer_grbg16"
                    if i in spec.unstamped_image_at and c == 1:
                        msg.header.stamp.sec, msg.header.stamp.nanosec = 0, 0
                bag.write(topic, msg, log_time + 1)
    return path
