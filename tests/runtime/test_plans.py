"""plan_trajectory: rollouts upsampled, filtered by consensus, averaged, gated."""

from __future__ import annotations

import dataclasses

import numpy as np

from blockplan.config import GateConfig, TrajectoryOutputConfig
from blockplan.runtime import plan_trajectory
from blockplan.types import CRITICAL_OBJECT_KEYS, DrivingAnswer, Lateral, Longitudinal, Plan


def _plan(rollouts: np.ndarray) -> Plan:
    answer = DrivingAnswer(
        critical_objects=dict.fromkeys(CRITICAL_OBJECT_KEYS, False),
        explanation="test",
        longitudinal=Longitudinal.KEEP,
        lateral=Lateral.LANE_FOLLOW,
        waypoints=rollouts[0],
    )
    return Plan(stamp_ns=10**9, answer=answer, rollouts=rollouts)


def _rollouts() -> np.ndarray:
    t = np.arange(1, 6, dtype=np.float64)
    base = np.stack([20.0 * t, np.zeros(5)], axis=-1)  # (5, 2)
    rollouts = np.stack([base + [0.2 * i, 0.0] for i in range(4)])  # (4, 5, 2)
    rollouts[3, 4, 0] += 100.0  # one wrong hundreds digit at 5 s
    return rollouts


def test_an_outlier_rollout_is_left_out_of_the_average_but_kept_for_display():
    rollouts = _rollouts()
    out = TrajectoryOutputConfig()
    relaxed = dataclasses.replace(
        GateConfig(), max_speed=1e3, max_accel=1e3, min_accel=-1e3, max_abs_jerk=1e4
    )
    filtered = plan_trajectory(_plan(rollouts), out, relaxed, max_deviation_m=5.0)
    plain = plan_trajectory(_plan(rollouts), out, relaxed, max_deviation_m=0.0)
    assert filtered.rollouts.shape[0] == plain.rollouts.shape[0] == 4
    end = np.argmin(np.abs(filtered.trajectory.t - 5.0))
    assert abs(filtered.trajectory.xy[end, 0] - 100.2) < 0.5  # mean of the three that agree
    assert plain.trajectory.xy[end, 0] > 120.0  # the plain mean is dragged 25 m ahead
