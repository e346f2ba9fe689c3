"""JMT upsampling of the model's 5 waypoints (WOD-E2E evaluation protocol, docs/ALGORITHMS.md §5).

The model emits waypoints at t = 1..5 s in the ego frame at t0. The protocol:

1. prepend the origin at t = 0 → 6 knots, 1 s apart;
2. knot velocities = numpy.gradient of the knot positions (central differences inside,
   one-sided at both ends); knot accelerations = numpy.gradient of those velocities;
3. one quintic (JMT) per 1 s segment and axis between neighbouring knot states;
4. sample t = dt, 2 dt, …, horizon_s (20 points at 4 Hz by default).

With a `start` state (the ego's current velocity and acceleration) knot 0 takes that state
instead of its finite-difference estimate; the other knots keep the protocol's estimates.
"""

from __future__ import annotations

import numpy as np

from blockplan.trajectory.curve import StateCurve
from blockplan.trajectory.frames import KinematicState
from blockplan.trajectory.kinematics import sample_times, trajectory_from_states
from blockplan.types import NUM_WAYPOINTS, WAYPOINT_PERIOD_S, Trajectory

WAYPOINT_TIMES_S = WAYPOINT_PERIOD_S * np.arange(1, NUM_WAYPOINTS + 1)  # (5,) t = 1..5 s


def _check_waypoints(waypoints: np.ndarray) -> np.ndarray:
    wp = np.asarray(waypoints, dtype=np.float64)
    if wp.shape != (NUM_WAYPOINTS, 2):
        raise ValueError(f"waypoints must be ({NUM_WAYPOINTS}, 2), got {wp.shape}")
    if not np.all(np.isfinite(wp)):
        raise ValueError(f"waypoints must be finite, got {wp.tolist()}")
    return wp


def knot_states(
    waypoints: np.ndarray, start: KinematicState | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The protocol's knots: times (6,), positions, velocities, accelerations (6, 2) each."""
    wp = _check_waypoints(waypoints)
    times = np.concatenate([[0.0], WAYPOINT_TIMES_S])  # (6,)
    pos = np.concatenate([np.zeros((1, 2)), wp], axis=0)  # (6, 2)
    vel = np.gradient(pos, WAYPOINT_PERIOD_S, axis=0)  # (6, 2)
    acc = np.gradient(vel, WAYPOINT_PERIOD_S, axis=0)  # (6, 2)
    if start is not None:
        vel[0] = start.velocity
        acc[0] = start.acceleration
    return times, pos, vel, acc


def upsample(
    waypoints: np.ndarray,
    dt: float = 0.25,
    horizon_s: float = 5.0,
    start: KinematicState | None = None,
    stamp_ns: int = 0,
) -> Trajectory:
    """JMT-upsample (5, 2) waypoints at t = 1..5 s to a `Trajectory` sampled at dt … horizon_s.

    With `start=None` this is the WOD-E2E protocol exactly (see the module docstring). A
    horizon beyond the last waypoint continues along the last curvature with the last
    longitudinal acceleration (see `StateCurve`). Yaw and curvature are held below
    `MIN_SPEED_FOR_HEADING`, starting from heading 0 (the ego's own heading at t0) and the
    start state's curvature (0 without one).
    """
    times, pos, vel, acc = knot_states(waypoints, start)
    curve = StateCurve(times, pos, vel, acc)
    t = sample_times(dt, horizon_s)
    p, v, a = curve.evaluate(t)
    initial_curvature = start.curvature if start is not None else 0.0
    return trajectory_from_states(stamp_ns, t, p, v, a, initial_curvature=initial_curvature)


def constant_velocity_waypoints(state: KinematicState) -> np.ndarray:
    """The constant-velocity baseline: (5, 2) waypoints at t = 1..5 s moving with the
    state's ego-frame velocity (`KinematicState.velocity`) in a straight line."""
    return WAYPOINT_TIMES_S[:, None] * state.velocity[None, :]
