"""The fallback policy: stop, or hold the last valid plan (stitched) up to a maximum age."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.config import FallbackConfig, GateConfig, TrajectoryOutputConfig
from blockplan.trajectory import Fallback, KinematicState, Pose2D, stitch, upsample
from blockplan.types import seconds_to_ns

OUTPUT = TrajectoryOutputConfig()
T0 = seconds_to_ns(50.0)
PLAN = upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), stamp_ns=T0)
POSE = Pose2D(100.0, -20.0, 0.5)
STATE = KinematicState(10.0)


def later(seconds: float) -> tuple[int, Pose2D]:
    """The time and pose `seconds` after T0, having driven along the plan."""
    return T0 + seconds_to_ns(seconds), POSE.compose(Pose2D(10.0 * seconds, 0.0, 0.0))


def test_hold_last_stitches_a_fresh_plan():
    fallback = Fallback(FallbackConfig(policy="hold_last", max_hold_age_s=1.5), OUTPUT)
    fallback.remember(PLAN, POSE)
    now_ns, now_pose = later(1.0)
    result = fallback.trajectory(now_ns, now_pose, STATE)
    assert result.action == "hold_last" and result.held_age_s == pytest.approx(1.0)
    expected = stitch(PLAN, POSE, now_pose, now_ns, STATE, OUTPUT.stitch_duration_s)
    np.testing.assert_allclose(result.trajectory.xy, expected.xy)
    np.testing.assert_allclose(result.trajectory.x, 10.0 * result.trajectory.t, atol=1e-9)
    assert result.trajectory.stamp_ns == now_ns


def test_hold_last_stops_when_the_plan_is_too_old_or_missing():
    fallback = Fallback(FallbackConfig(policy="hold_last", max_hold_age_s=1.5), OUTPUT)
    now_ns, now_pose = later(0.5)
    none = fallback.trajectory(now_ns, now_pose, STATE)
    assert none.action == "stop" and "no valid plan" in none.reason
    fallback.remember(PLAN, POSE)
    now_ns, now_pose = later(1.6)
    old = fallback.trajectory(now_ns, now_pose, STATE)
    assert old.action == "stop" and "old" in old.reason and old.held_age_s is None
    assert old.trajectory.stamp_ns == now_ns
    assert old.trajectory.speed[-1] < STATE.v and np.all(np.diff(old.trajectory.speed) <= 1e-12)
    fallback.reset()
    assert fallback.last_plan is None


def test_stop_policy_always_stops_with_the_configured_deceleration():
    fallback = Fallback(FallbackConfig(policy="stop", stop_deceleration=3.0), OUTPUT, GateConfig())
    fallback.remember(PLAN, POSE)
    now_ns, now_pose = later(0.1)
    result = fallback.trajectory(now_ns, now_pose, STATE)
    assert result.action == "stop" and result.reason == "policy is stop"
    assert result.trajectory.accel.min() >= -3.0 - 1e-6
    assert result.trajectory.accel.min() < -2.5


def test_time_going_backwards_is_an_error():
    fallback = Fallback(FallbackConfig(), OUTPUT)
    fallback.remember(PLAN, POSE)
    with pytest.raises(ValueError, match="older"):
        fallback.remember(upsample(np.zeros((5, 2)), stamp_ns=T0 - 1), POSE)
    with pytest.raises(ValueError, match="before the held plan"):
        fallback.trajectory(T0 - 1, POSE, STATE)
