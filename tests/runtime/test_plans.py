"""plan_trajectory: rollouts fitted, filtered by consensus, averaged, gated, comfort checked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.config import ComfortConfig, GateConfig, TrajectoryOutputConfig
from blockplan.runtime import InvalidPlanError, plan_trajectory
from blockplan.trajectory import check_gates, upsample
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


def test_published_path_is_the_fit_and_metrics_keep_the_wod_interpolation():
    """The published trajectory is the jerk-minimizing fit (within the tolerance of each
    waypoint), `protocol` the WOD-E2E interpolation the metrics score; a comfort excess is
    reported, a hard-limit excess rejects."""
    t = np.arange(1, 6, dtype=np.float64)
    rng = np.random.default_rng(0)
    noisy = np.stack([20.0 * t, np.zeros(5)], -1) + rng.uniform(-0.5, 0.5, (5, 2))
    out = TrajectoryOutputConfig()
    processed = plan_trajectory(_plan(noisy[None]), out, GateConfig())
    assert processed.comfort.ok
    np.testing.assert_allclose(processed.protocol.xy, upsample(noisy).xy)
    at_waypoints = processed.trajectory.xy[3::4]
    assert np.linalg.norm(at_waypoints - noisy, axis=-1).max() <= out.waypoint_tolerance_m + 1e-6
    assert np.abs(np.diff(processed.trajectory.accel) / 0.25).max() < 8.37
    assert not check_gates(processed.protocol, ComfortConfig()).ok  # WOD: over the comfort jerk

    eager = np.stack([5.0 * t + 1.75 * t**2, np.zeros(5)], -1)  # 3.5 m/s²
    processed = plan_trajectory(_plan(eager[None]), out, GateConfig())
    assert processed.comfort.failed_checks == ("max_accel",)
    with pytest.raises(InvalidPlanError, match="max_accel"):
        plan_trajectory(_plan(eager[None]), out, dataclasses.replace(GateConfig(), max_accel=3.0))
