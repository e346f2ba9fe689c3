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
"""

from __future__ import annotations

import numpy as np

from blockplan.trajectory.frames import KinematicState, Pose2D
from blockplan.trajectory.jmt import evaluate_quintic, quintic_coefficients
from blockplan.trajectory.kinematics import (
    curve_from_trajectory,
    sample_times,
    trajectory_from_states,
)
from blockplan.types import Trajectory, ns_to_seconds


def stitch(
    plan: Trajectory,
    plan_pose: Pose2D,
    now_pose: Pose2D,
    now_ns: int,
    commanded: KinematicState,
    join_s: float,
    dt: float = 0.25,
    horizon_s: float = 5.0,
) -> Trajectory:
    """`plan` (stamped t0, ego frame at t0 whose odometry pose is `plan_pose`) re-expressed in
    the ego frame at `now_ns` (odometry pose `now_pose`), stamped `now_ns`, sampled at
    dt … horizon_s and joined to `commanded` over `join_s` seconds. See the module docstring.
    """
    elapsed = ns_to_seconds(int(now_ns) - int(plan.stamp_ns))
    if elapsed < 0:
        raise ValueError(f"stitch: now_ns={now_ns} is before the plan's stamp_ns={plan.stamp_ns}")
    if not (0.0 <= join_s < horizon_s):
        raise ValueError(f"stitch: join_s={join_s!r} must be in [0, horizon_s={horizon_s})")
    relative = now_pose.inverse().compose(plan_pose)  # plan frame → now frame
    curve = curve_from_trajectory(plan)
    t = sample_times(dt, horizon_s)  # (P,) output times since now

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
