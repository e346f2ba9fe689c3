"""Between vector states (velocity / acceleration vectors) and `Trajectory` fields.

A `Trajectory` stores speed, heading, longitudinal acceleration and curvature. From velocity
v⃗ and acceleration a⃗ vectors at a point with heading h (unit tangent) and left normal n:

    speed = |v⃗|,  yaw = atan2(v⃗),  accel = a⃗·h,  curvature = (v⃗ × a⃗) / |v⃗|³

Below `MIN_SPEED_FOR_HEADING` the heading of v⃗ is meaningless, so yaw and curvature hold
their last meaningful value (the given initial values before any); yaw is unwrapped so it is
continuous along the trajectory. The inverse, exact wherever the speed is above the threshold:

    v⃗ = speed · h,  a⃗ = accel · h + speed² · curvature · n
"""

from __future__ import annotations

import math

import numpy as np

from blockplan.trajectory.curve import StateCurve, unit
from blockplan.trajectory.frames import MIN_SPEED_FOR_HEADING, KinematicState
from blockplan.types import Trajectory


def sample_times(dt: float, horizon_s: float) -> np.ndarray:
    """(P,) sample times dt, 2 dt, …, up to horizon_s (inclusive); P = floor(horizon_s / dt)."""
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt={dt!r}: must be a finite number > 0")
    if not (math.isfinite(horizon_s) and horizon_s >= dt):
        raise ValueError(f"horizon_s={horizon_s!r}: must be a finite number >= dt ({dt})")
    num_points = int(math.floor(horizon_s / dt + 1e-9))
    return dt * np.arange(1, num_points + 1, dtype=np.float64)


def _hold(values: np.ndarray, valid: np.ndarray, initial: float) -> np.ndarray:
    """Forward-fill `values` (P,) where `valid` is False, starting from `initial`."""
    last = np.where(valid, np.arange(len(values)), -1)
    last = np.maximum.accumulate(last)
    return np.where(last >= 0, values[np.maximum(last, 0)], initial)


def trajectory_from_states(
    stamp_ns: int,
    t: np.ndarray,
    pos: np.ndarray,
    vel: np.ndarray,
    acc: np.ndarray,
    initial_yaw: float = 0.0,
    initial_curvature: float = 0.0,
) -> Trajectory:
    """A `Trajectory` from positions, velocities and accelerations (P, 2) at times t (P,)."""
    vel = np.asarray(vel, dtype=np.float64)
    acc = np.asarray(acc, dtype=np.float64)
    speed = np.hypot(vel[:, 0], vel[:, 1])  # (P,)
    is_moving = speed >= MIN_SPEED_FOR_HEADING
    raw_yaw = np.arctan2(vel[:, 1], vel[:, 0])
    safe_speed = np.where(is_moving, speed, 1.0)
    raw_curvature = (vel[:, 0] * acc[:, 1] - vel[:, 1] * acc[:, 0]) / safe_speed**3
    yaw = _hold(raw_yaw, is_moving, initial_yaw)
    yaw = np.unwrap(np.concatenate([[initial_yaw], yaw]))[1:]
    curvature = _hold(raw_curvature, is_moving, initial_curvature)
    tangent, _ = unit(yaw)
    accel = np.sum(acc * tangent, axis=-1)
    pos = np.asarray(pos, dtype=np.float64)
    return Trajectory(
        stamp_ns=int(stamp_ns),
        t=np.asarray(t, dtype=np.float64).copy(),
        x=pos[:, 0].copy(),
        y=pos[:, 1].copy(),
        yaw=yaw,
        speed=speed,
        accel=accel,
        curvature=curvature,
    )


def states_from_trajectory(traj: Trajectory) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions, velocity and acceleration vectors (P, 2) of a trajectory's samples."""
    yaw = np.asarray(traj.yaw, dtype=np.float64)
    speed = np.asarray(traj.speed, dtype=np.float64)
    tangent, normal = unit(yaw)
    vel = speed[:, None] * tangent
    lateral = speed**2 * np.asarray(traj.curvature, dtype=np.float64)
    acc = np.asarray(traj.accel, dtype=np.float64)[:, None] * tangent + lateral[:, None] * normal
    return traj.xy.astype(np.float64), vel, acc


def curve_from_trajectory(traj: Trajectory) -> StateCurve:
    """The continuous curve through a trajectory's samples (see `StateCurve`)."""
    if len(traj.t) == 0:
        raise ValueError("curve_from_trajectory: the trajectory has no points")
    pos, vel, acc = states_from_trajectory(traj)
    return StateCurve(
        traj.t,
        pos,
        vel,
        acc,
        end_heading=float(traj.yaw[-1]),
        end_curvature=float(traj.curvature[-1]),
    )


def state_at(traj: Trajectory, t_s: float) -> KinematicState:
    """The trajectory's intrinsic state (speed, longitudinal acceleration, curvature) at `t_s`
    seconds after its stamp, read from its continuous curve (`StateCurve`: exact between the
    samples of a JMT plan; extrapolated before the first and after the last sample). Use it as
    the commanded state of the next stitch. Frame-free: no ego-frame vectors are set.
    """
    curve = curve_from_trajectory(traj)
    _, vel, acc = curve.evaluate(np.array([float(t_s)]))  # (1, 2) each
    # Heading and curvature held as in the trajectory itself: seed from the nearest sample.
    nearest = int(np.argmin(np.abs(np.asarray(traj.t) - t_s)))
    point = trajectory_from_states(
        traj.stamp_ns,
        np.array([t_s]),
        np.zeros((1, 2)),
        vel,
        acc,
        initial_yaw=float(traj.yaw[nearest]),
        initial_curvature=float(traj.curvature[nearest]),
    )
    return KinematicState(
        v=float(point.speed[0]), a=float(point.accel[0]), curvature=float(point.curvature[0])
    )
