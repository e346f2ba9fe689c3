"""Stitching a plan onto the present (docs/DESIGN.md §5, docs/ALGORITHMS.md §5).

A plan made at t0 is expressed in the ego frame at t0. At a later time `now` the control loop
publishes it re-expressed in the ego frame at `now`, with the elapsed part dropped, and joined
to the currently commanded state so consecutive published trajectories are C2-continuous:

1. relative pose: plan frame → now frame is `now_pose⁻¹ ∘ plan_pose` (both in odometry);
2. the plan is a continuous curve through its samples (`StateCurve`, exact for JMT plans),
   evaluated at plan time `elapsed + s` for output times s = dt … horizon_s;
3. for s < join_s the output follows the JMT from the commanded state (at the origin of the
   now frame, s = 0) to the plan's state at s = join_s; join_s = 0 means no join.

Where `elapsed + s` runs past the plan's last sample the plan is extended along its last
curvature with its last longitudinal acceleration (a braking plan comes to rest and stays
there) — the plan's own final intent, continued for at most the plan's age.

At now = t0 with the commanded state equal to the plan's start state and join_s within the
plan's first JMT segment (<= 1 s for an upsampled plan), the output equals the plan.

With `speed_join_s` > 0 the plan is first retimed along its path (`retime`): its speed
profile from `elapsed` on plus a correction that starts at the commanded speed and
acceleration and dies out over `speed_join_s` (`speed_join`, the least ∫jerk² with the end
position free). The fitted plan's speed at t0 is free and differs from the ego's by a few
tenths of a m/s from plan to plan; the position join alone must then make up the distance in
`join_s`, overshooting the plan's speed by about half the difference, and the next plan,
made from the overshoot, pulls the other way: a speed oscillation with a period of two
plans. The retimed plan gives that distance up instead (the same path, reached a little
earlier or later), so the join is left with the lateral offset and heading.

The speed join never eases the car into a plan that asks for less: where the plan's speed now
is below the commanded speed by more than `BRAKE_SPEED_MARGIN` or its deceleration exceeds
the commanded one by more than `BRAKE_ACCEL_MARGIN` (`asks_to_slow`), the plan keeps its
timing and the position join catches up at once, as without a speed join: a plan that
answers a car ahead is followed from the first tick, not over `speed_join_s`.

The commanded state is either the ego's measured one (odometry) or what the previously
published trajectory commands at now (`continued_state`): the latter makes consecutive
published trajectories C2-continuous in velocity and acceleration whatever the plans and the
tracking error do, so a new plan changes the commanded acceleration only through the join's
jerk, never by a step.
"""

from __future__ import annotations

import numpy as np

from blockplan.trajectory.curve import StateCurve
from blockplan.trajectory.frames import MIN_SPEED_FOR_HEADING, KinematicState, Pose2D
from blockplan.trajectory.jmt import evaluate_quintic, quintic_coefficients
from blockplan.trajectory.kinematics import (
    curve_from_trajectory,
    sample_times,
    trajectory_from_states,
)
from blockplan.types import Trajectory, ns_to_seconds

# The speed join is for the few tenths of a m/s a plan's free start speed jitters by, not for
# a plan that slows down (module docstring).
BRAKE_SPEED_MARGIN = 0.5  # m/s: the plan's speed now this far below the commanded speed
BRAKE_ACCEL_MARGIN = 1.0  # m/s²: the plan's acceleration now this far below the commanded one


def stitch(
    plan: Trajectory,
    plan_pose: Pose2D,
    now_pose: Pose2D,
    now_ns: int,
    commanded: KinematicState,
    join_s: float,
    dt: float = 0.25,
    horizon_s: float = 5.0,
    speed_join_s: float = 0.0,
) -> Trajectory:
    """`plan` (stamped t0, ego frame at t0 whose odometry pose is `plan_pose`) re-expressed in
    the ego frame at `now_ns` (odometry pose `now_pose`), stamped `now_ns`, sampled at
    dt … horizon_s and joined to `commanded` over `join_s` seconds; with `speed_join_s` > 0
    the plan is first retimed along its path (`retime`). See the module docstring.
    """
    elapsed = ns_to_seconds(int(now_ns) - int(plan.stamp_ns))
    if elapsed < 0:
        raise ValueError(f"stitch: now_ns={now_ns} is before the plan's stamp_ns={plan.stamp_ns}")
    if not (0.0 <= join_s < horizon_s):
        raise ValueError(f"stitch: join_s={join_s!r} must be in [0, horizon_s={horizon_s})")
    if not speed_join_s >= 0:
        raise ValueError(f"stitch: speed_join_s={speed_join_s!r} must be >= 0")
    relative = now_pose.inverse().compose(plan_pose)  # plan frame → now frame
    curve = curve_from_trajectory(plan)
    t = sample_times(dt, horizon_s)  # (P,) output times since now
    if speed_join_s > 0 and not asks_to_slow(curve, elapsed, commanded):
        curve = retime(curve, elapsed, commanded.v, commanded.a, speed_join_s, horizon_s)
        elapsed = 0.0

    pos, vel, acc = curve.evaluate(elapsed + t)  # (P, 2) each, plan frame
    pos = relative.transform_points(pos)
    vel = relative.rotate_vectors(vel)
    acc = relative.rotate_vectors(acc)

    if join_s > 0:
        end_pos, end_vel, end_acc = curve.evaluate(np.array([elapsed + join_s]))  # (1, 2) each
        end_pos = relative.transform_points(end_pos)[0]
        end_vel = relative.rotate_vectors(end_vel)[0]
        end_acc = relative.rotate_vectors(end_acc)[0]
        coeffs = quintic_coefficients(  # (2, 6): one quintic per axis
            np.zeros(2),
            commanded.velocity,
            commanded.acceleration,
            end_pos,
            end_vel,
            end_acc,
            join_s,
        )
        joining = t < join_s
        p, v, a, _ = evaluate_quintic(coeffs, t[joining][:, None])  # (P_j, 2) each
        pos[joining], vel[joining], acc[joining] = p, v, a

    return trajectory_from_states(
        now_ns, t, pos, vel, acc, initial_yaw=0.0, initial_curvature=commanded.curvature
    )


_RETIME_STEP_S = 0.005  # the grid on which a retimed plan's path is read (s)


class _Samples:
    """Position, velocity and acceleration given on a fine time grid, linearly interpolated
    (`evaluate` like `StateCurve`'s, held at the ends)."""

    def __init__(self, times: np.ndarray, pos: np.ndarray, vel: np.ndarray, acc: np.ndarray):
        self.times, self.pos, self.vel, self.acc = times, pos, vel, acc

    def evaluate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))

        def at(values: np.ndarray) -> np.ndarray:
            return np.stack([np.interp(t, self.times, values[:, k]) for k in range(2)], axis=-1)

        return at(self.pos), at(self.vel), at(self.acc)


def speed_join(e0: float, de0: float, T: float, tau: np.ndarray) -> tuple[np.ndarray, ...]:
    """The minimum-jerk speed correction: the cubic e(τ) with e(0) = e0, e'(0) = de0,
    e(T) = e'(T) = 0 (0 after T), which minimises ∫ e''² — the jerk the correction adds —
    with the end position free. Returns its integral E (m), e (m/s) and e' (m/s²) at `tau`."""
    x = np.clip(np.asarray(tau, dtype=np.float64) / T, 0.0, 1.0)
    e = e0 * (2 * x**3 - 3 * x**2 + 1) + de0 * T * (x**3 - 2 * x**2 + x)
    de = (e0 * (6 * x**2 - 6 * x) + de0 * T * (3 * x**2 - 4 * x + 1)) / T
    big_e = T * (e0 * (x**4 / 2 - x**3 + x) + de0 * T * (x**4 / 4 - 2 * x**3 / 3 + x**2 / 2))
    return big_e, e, de


def asks_to_slow(curve: StateCurve, elapsed: float, commanded: KinematicState) -> bool:
    """Whether the plan at plan time `elapsed` is slower than `commanded` by more than
    `BRAKE_SPEED_MARGIN` or decelerates harder by more than `BRAKE_ACCEL_MARGIN`."""
    _, vel, acc = curve.evaluate(np.array([elapsed]))  # (1, 2) each
    speed = float(np.hypot(*vel[0]))
    along = float(vel[0] @ acc[0]) / speed if speed >= MIN_SPEED_FOR_HEADING else 0.0
    return commanded.v - speed > BRAKE_SPEED_MARGIN or commanded.a - along > BRAKE_ACCEL_MARGIN


def retime(
    curve: StateCurve,
    elapsed: float,
    speed: float,
    accel: float,
    speed_join_s: float,
    horizon_s: float,
) -> _Samples:
    """The plan's path from its point at `elapsed` on, driven with a speed that starts at
    `speed` and `accel` and meets the plan's own speed profile after `speed_join_s` seconds
    through the minimum-jerk correction (`speed_join`): the end position along the path is
    free, so a plan whose speed differs from the commanded one is not caught up with (the
    position join would overshoot its speed to make up the distance, and the next plan would
    undo it). After the join the plan's speed profile is followed, shifted along its path by
    what the join gained or lost. Time 0 of the result is now; the plan frame is kept.
    A commanded state equal to the plan's gives the plan itself (to the grid's round-off)
    wherever the plan moves; below `MIN_SPEED_FOR_HEADING` its direction is held from the
    last moving point (a plan that reverses through a standstill is not reproduced there)."""
    grid = np.arange(0.0, horizon_s + speed_join_s + 2 * _RETIME_STEP_S, _RETIME_STEP_S)
    pos, vel, acc = curve.evaluate(elapsed + grid)  # (G, 2) each
    plan_speed = np.hypot(vel[:, 0], vel[:, 1])  # (G,)
    moving = plan_speed >= MIN_SPEED_FOR_HEADING
    heading = np.arctan2(vel[:, 1], vel[:, 0])
    if moving.any():  # held where the plan stands still (from the first moving sample before)
        idx = np.where(moving, np.arange(len(grid)), -1)
        idx = np.maximum.accumulate(idx)
        idx = np.where(idx < 0, int(np.argmax(moving)), idx)
        heading = heading[idx]
    else:
        heading = np.zeros_like(heading)
    tangent = np.stack([np.cos(heading), np.sin(heading)], axis=-1)  # (G, 2)
    normal = np.stack([-tangent[:, 1], tangent[:, 0]], axis=-1)
    plan_accel = np.einsum("gk,gk->g", acc, tangent)
    safe = np.where(moving, plan_speed, 1.0)
    curvature = np.where(moving, (vel[:, 0] * acc[:, 1] - vel[:, 1] * acc[:, 0]) / safe**3, 0.0)
    # The plan's arc length since `elapsed` (trapezoid on the fine grid), strictly increasing
    # for the inversion below.
    arc = np.concatenate([[0.0], np.cumsum(0.5 * (plan_speed[1:] + plan_speed[:-1]))])
    arc = arc * _RETIME_STEP_S + 1e-12 * grid
    big_e, e, de = speed_join(speed - plan_speed[0], accel - plan_accel[0], speed_join_s, grid)
    new_speed = np.maximum(plan_speed + e, 0.0)
    new_accel = np.where(plan_speed + e > 0, plan_accel + de, 0.0)
    new_arc = np.maximum.accumulate(np.maximum(arc + big_e, 0.0))
    new_arc = np.minimum(new_arc, arc[-1])
    u = np.interp(new_arc, arc, grid)  # (G,) where on the plan each new time is
    at = np.round(u / _RETIME_STEP_S).astype(int)  # the nearest grid sample for the frame
    new_pos = np.stack([np.interp(u, grid, pos[:, k]) for k in range(2)], axis=-1)
    new_vel = new_speed[:, None] * tangent[at]
    new_acc = (
        new_accel[:, None] * tangent[at] + (new_speed**2 * curvature[at])[:, None] * normal[at]
    )
    return _Samples(grid, new_pos, new_vel, new_acc)


def continued_state(
    previous: Trajectory, previous_pose: Pose2D, now_pose: Pose2D, now_ns: int
) -> tuple[KinematicState, float]:
    """What the previously published trajectory (stamped t_p, ego frame at t_p whose odometry
    pose is `previous_pose`) commands at `now_ns`, in the ego frame at now (odometry pose
    `now_pose`): its velocity and acceleration vectors there (with speed, longitudinal
    acceleration and curvature), read from its continuous curve (`StateCurve`; before its
    first sample, the parabola of that sample), and the distance (m) from the ego to its
    point for now — how far the ego is off what it was told to do.
    """
    elapsed = ns_to_seconds(int(now_ns) - int(previous.stamp_ns))
    if elapsed < 0:
        raise ValueError(
            f"continued_state: now_ns={now_ns} is before the trajectory's stamp_ns="
            f"{previous.stamp_ns}"
        )
    relative = now_pose.inverse().compose(previous_pose)  # previous frame → now frame
    pos, vel, acc = curve_from_trajectory(previous).evaluate(np.array([elapsed]))  # (1, 2) each
    pos = relative.transform_points(pos)[0]
    vel = relative.rotate_vectors(vel)[0]
    acc = relative.rotate_vectors(acc)[0]
    speed = float(np.hypot(*vel))
    if speed >= MIN_SPEED_FOR_HEADING:
        tangent = vel / speed
        accel = float(acc @ tangent)
        curvature = float((vel[0] * acc[1] - vel[1] * acc[0]) / speed**3)
    else:  # no heading: the acceleration's x component, no curvature
        accel, curvature = float(acc[0]), 0.0
    state = KinematicState(
        v=speed,
        a=accel,
        curvature=curvature,
        vx=float(vel[0]),
        vy=float(vel[1]),
        ax=float(acc[0]),
        ay=float(acc[1]),
    )
    return state, float(np.hypot(*pos))
