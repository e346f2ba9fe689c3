"""Tracking controller: pure pursuit for steering, a PID on the planned speed, and the
mapping onto highway-env's normalised `ContinuousAction` ([-1, 1]² → acceleration and
steering ranges).

The tracked trajectory is a published `Trajectory` (ego frame at its stamp, REP-103); the
controller expresses it in the ego frame at the current pose and time. highway-env's
kinematic vehicle is a bicycle about its centre: path curvature κ = 2 sin β / L with slip
β = atan(tan δ / 2), so the steering for a curvature is δ = atan(2 tan(asin(κ L / 2))).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blockplan.trajectory import Pose2D
from blockplan.types import Trajectory, ns_to_seconds


@dataclass(frozen=True)
class ControllerConfig:
    """lookahead_s, min/max_lookahead_m: pure-pursuit look-ahead distance = clip(v · s).
    kp, ki: speed PID gains (1/s, 1/s²); the derivative term is the planned acceleration
    (feed-forward). Ranges: highway-env ContinuousAction's physical limits."""

    lookahead_s: float = 0.8
    min_lookahead_m: float = 5.0
    max_lookahead_m: float = 30.0
    kp: float = 1.0
    ki: float = 0.1
    integral_limit: float = 5.0
    acceleration_range: tuple[float, float] = (-5.0, 5.0)
    steering_range_rad: float = math.pi / 4
    wheelbase_m: float = 5.0  # highway-env Vehicle.LENGTH (the bicycle's length)


@dataclass(frozen=True)
class Command:
    """Physical command (REP-103: steering > 0 turns left) and its normalised action."""

    acceleration: float
    steering: float
    action: np.ndarray  # (2,) highway-env [acceleration, steering] in [-1, 1]


def _densify(xy: np.ndarray, step_m: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(P, 2) polyline -> (Q, 2) points every `step_m` of arc length and their arc lengths."""
    seg = np.linalg.norm(np.diff(xy, axis=0), axis=1)  # (P-1,)
    s = np.concatenate([[0.0], np.cumsum(seg)])  # (P,)
    if s[-1] < 1e-6:
        return xy[:1], s[:1]
    q = np.arange(0.0, s[-1] + 1e-9, step_m)  # (Q,)
    return np.stack([np.interp(q, s, xy[:, 0]), np.interp(q, s, xy[:, 1])], axis=-1), q


class TrackingController:
    """Pure pursuit + speed PID. Call `reset()` between episodes."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self._integral = 0.0

    def reset(self) -> None:
        self._integral = 0.0

    def command(
        self,
        traj: Trajectory,
        traj_pose: Pose2D,
        pose: Pose2D,
        speed: float,
        now_ns: int,
        dt: float,
    ) -> Command:
        """traj_pose: the ego pose (odom) at the trajectory's stamp; pose, speed: the ego now."""
        c = self.config
        tau = max(0.0, ns_to_seconds(now_ns - traj.stamp_ns))
        # The path from the point planned for now onwards, in the current ego frame.
        odom = traj_pose.transform_points(traj.xy)  # (P, 2)
        local = pose.inverse().transform_points(odom)  # (P, 2)
        ahead = traj.t >= tau
        start = np.array(
            [[np.interp(tau, traj.t, local[:, 0]), np.interp(tau, traj.t, local[:, 1])]]
        )
        path, arc = _densify(np.concatenate([start, local[ahead]], axis=0))
        lookahead = float(np.clip(c.lookahead_s * speed, c.min_lookahead_m, c.max_lookahead_m))
        dist = np.linalg.norm(path, axis=1)  # (Q,)
        beyond = np.flatnonzero((dist >= lookahead) & (path[:, 0] > 0.0))
        if len(beyond):
            target = path[beyond[0]]
        elif arc[-1] > 1.0 and path[-1, 0] > 0.5:
            target = path[-1]
        else:
            target = None  # a stop in place: hold the wheel straight
        curvature = 0.0
        if target is not None:
            curvature = 2.0 * float(target[1]) / float(target @ target)
        sin_beta = float(np.clip(curvature * c.wheelbase_m / 2.0, -0.99, 0.99))
        steering = math.atan(2.0 * math.tan(math.asin(sin_beta)))
        steering = float(np.clip(steering, -c.steering_range_rad, c.steering_range_rad))
        # Speed: the planned speed one control period ahead, feed-forward planned accel.
        v_ref = float(np.interp(tau + dt, traj.t, traj.speed))
        a_ff = float(np.interp(tau, traj.t, traj.accel))
        error = v_ref - speed
        self._integral = float(
            np.clip(self._integral + error * dt, -c.integral_limit, c.integral_limit)
        )
        lo, hi = c.acceleration_range
        accel = float(np.clip(a_ff + c.kp * error + c.ki * self._integral, lo, hi))
        # highway-env's steering is positive towards its +y (REP-103's right).
        action = np.array(
            [
                np.interp(accel, [lo, hi], [-1.0, 1.0]),
                -steering / c.steering_range_rad,
            ]
        )
        return Command(accel, steering, action)
