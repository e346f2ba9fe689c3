"""Averaging N trajectory rollouts (shared-prefix test-time scaling, docs/ALGORITHMS.md §4.5).

The N rollouts of one plan share their stamp and sample times. The mean trajectory is the
pointwise mean in time of positions, velocity vectors and acceleration vectors (so, because
JMT upsampling is linear in the waypoints, averaging upsampled rollouts equals upsampling the
mean waypoints); its speed, heading, acceleration and curvature are derived from those means.
The spread at each time is the RMS distance of the rollouts from the mean position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blockplan.trajectory.frames import KinematicState
from blockplan.trajectory.kinematics import states_from_trajectory, trajectory_from_states
from blockplan.trajectory.upsample import upsample
from blockplan.types import Trajectory

# Rollouts of one plan are sampled at identical times; allow float round-off only.
_TIME_TOLERANCE_S = 1e-9


@dataclass(frozen=True)
class RolloutAverage:
    """mean: the averaged trajectory; spread: (P,) RMS distance of the rollouts from the mean
    position at each time (m); rollouts: the individual trajectories, in input order."""

    mean: Trajectory
    spread: np.ndarray
    rollouts: tuple[Trajectory, ...]

    @property
    def num_rollouts(self) -> int:
        return len(self.rollouts)


def _circular_mean(angles: np.ndarray) -> float:
    return float(np.arctan2(np.mean(np.sin(angles)), np.mean(np.cos(angles))))


def consensus_rollouts(waypoints: np.ndarray, max_deviation_m: float) -> np.ndarray:
    """Indices of the rollouts to average: those whose every waypoint lies within
    `max_deviation_m` of the waypoint-wise median of the N rollouts (N, 5, 2). Never empty:
    when no rollout qualifies, the one with the smallest largest deviation is kept; with
    `max_deviation_m` 0 or N < 3 (no majority to judge by) every rollout is kept."""
    waypoints = np.asarray(waypoints, dtype=np.float64)
    n = waypoints.shape[0]
    if max_deviation_m <= 0 or n < 3:
        return np.arange(n)
    median = np.median(waypoints, axis=0)  # (5, 2)
    deviation = np.linalg.norm(waypoints - median, axis=-1).max(axis=-1)  # (N,)
    kept = np.flatnonzero(deviation <= max_deviation_m)
    return kept if kept.size else np.array([int(np.argmin(deviation))])


def average_rollouts(trajectories: Sequence[Trajectory]) -> RolloutAverage:
    """The pointwise mean of N >= 1 rollouts with one stamp and identical sample times."""
    rollouts = tuple(trajectories)
    if not rollouts:
        raise ValueError("average_rollouts: needs at least one trajectory")
    first = rollouts[0]
    if len(first.t) == 0:
        raise ValueError("average_rollouts: the rollouts have no points")
    for i, traj in enumerate(rollouts[1:], start=1):
        if traj.stamp_ns != first.stamp_ns:
            raise ValueError(
                f"average_rollouts: rollout {i} has stamp_ns={traj.stamp_ns}, "
                f"rollout 0 has {first.stamp_ns}"
            )
        if traj.t.shape != first.t.shape or not np.allclose(
            traj.t, first.t, rtol=0.0, atol=_TIME_TOLERANCE_S
        ):
            raise ValueError(f"average_rollouts: rollout {i} has different sample times")
    states = [states_from_trajectory(traj) for traj in rollouts]
    pos = np.stack([s[0] for s in states])  # (N, P, 2)
    vel = np.stack([s[1] for s in states])  # (N, P, 2)
    acc = np.stack([s[2] for s in states])  # (N, P, 2)
    mean_pos = pos.mean(axis=0)  # (P, 2)
    spread = np.sqrt(np.mean(np.sum((pos - mean_pos) ** 2, axis=-1), axis=0))  # (P,)
    # Where the mean is too slow to carry a heading, the rollouts' first yaw / curvature
    # (held values themselves when slow) seed the hold.
    initial_yaw = _circular_mean(np.array([traj.yaw[0] for traj in rollouts]))
    initial_curvature = float(np.mean([traj.curvature[0] for traj in rollouts]))
    mean = trajectory_from_states(
        first.stamp_ns,
        first.t,
        mean_pos,
        vel.mean(axis=0),
        acc.mean(axis=0),
        initial_yaw=initial_yaw,
        initial_curvature=initial_curvature,
    )
    return RolloutAverage(mean=mean, spread=spread, rollouts=rollouts)


def average_waypoint_rollouts(
    rollouts: np.ndarray,
    dt: float = 0.25,
    horizon_s: float = 5.0,
    start: KinematicState | None = None,
    stamp_ns: int = 0,
) -> RolloutAverage:
    """JMT-upsample each of N waypoint rollouts (N, 5, 2) (e.g. `Plan.rollouts`) with the same
    grid and start state, then average them."""
    rollouts = np.asarray(rollouts, dtype=np.float64)
    if rollouts.ndim != 3 or rollouts.shape[0] < 1:
        raise ValueError(f"rollouts must be (N, 5, 2) with N >= 1, got {rollouts.shape}")
    return average_rollouts(
        [upsample(w, dt=dt, horizon_s=horizon_s, start=start, stamp_ns=stamp_ns) for w in rollouts]
    )
