"""Rollout averaging: identity, linearity with upsampling, spread, input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from blockplan.trajectory import (
    MIN_SPEED_FOR_HEADING,
    KinematicState,
    average_rollouts,
    average_waypoint_rollouts,
    consensus_rollouts,
    upsample,
)

waypoint_arrays = arrays(np.float64, (5, 2), elements=st.floats(-80.0, 80.0, allow_nan=False))
start_states = st.builds(
    KinematicState, v=st.floats(0.0, 30.0), a=st.floats(-4.0, 3.0), curvature=st.floats(-0.2, 0.2)
)


def assert_same_trajectory(a, b, atol=1e-9):
    assert a.stamp_ns == b.stamp_ns
    for name in ("t", "x", "y", "speed", "accel", "curvature"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=atol, err_msg=name)
    yaw_error = np.remainder(a.yaw - b.yaw + math.pi, 2 * math.pi) - math.pi
    np.testing.assert_allclose(yaw_error, 0.0, atol=atol, err_msg="yaw")


@settings(deadline=None)
@given(waypoint_arrays, st.one_of(st.none(), start_states), st.integers(1, 6))
def test_averaging_identical_rollouts_is_the_identity(waypoints, start, num_rollouts):
    traj = upsample(waypoints, start=start, stamp_ns=7)
    # Exactly at the threshold, round-off decides whether a heading is held.
    assume(np.all(np.abs(traj.speed - MIN_SPEED_FOR_HEADING) > 1e-6))
    result = average_rollouts([traj] * num_rollouts)
    scale = 1.0 + np.abs(waypoints).max()
    assert_same_trajectory(result.mean, traj, atol=1e-9 * scale**2)
    np.testing.assert_allclose(result.spread, 0.0, atol=1e-9 * scale)
    assert result.num_rollouts == num_rollouts


@settings(deadline=None)
@given(st.lists(waypoint_arrays, min_size=2, max_size=5), st.one_of(st.none(), start_states))
def test_mean_of_upsampled_is_upsampled_mean(waypoint_sets, start):
    # JMT upsampling is linear in the waypoints, so the two orders agree.
    rollouts = [upsample(w, start=start) for w in waypoint_sets]
    mean = average_rollouts(rollouts).mean
    expected = upsample(np.mean(waypoint_sets, axis=0), start=start)
    scale = 1.0 + max(np.abs(w).max() for w in waypoint_sets)
    np.testing.assert_allclose(mean.xy, expected.xy, atol=1e-9 * scale)
    # Velocities are read back from speed and heading, exact where every rollout has one.
    exact = np.all([r.speed >= MIN_SPEED_FOR_HEADING for r in rollouts], axis=0)
    np.testing.assert_allclose(mean.speed[exact], expected.speed[exact], atol=1e-8 * scale)


def test_spread_is_rms_distance_from_the_mean():
    base = np.outer([1, 2, 3, 4, 5], [10.0, 0.0])
    left = upsample(base + [0.0, 1.0])
    right = upsample(base - [0.0, 1.0])
    result = average_rollouts([left, right])
    np.testing.assert_allclose(result.mean.xy, upsample(base).xy, atol=1e-12)
    # Both rollouts are 1 m from the mean at the knots (the offset ramps in from the origin).
    np.testing.assert_allclose(result.spread[[3, 7, 11, 15, 19]], 1.0, atol=1e-12)
    assert result.rollouts == (left, right)


def test_mismatched_rollouts_are_rejected():
    a = upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), stamp_ns=1)
    with pytest.raises(ValueError, match="at least one"):
        average_rollouts([])
    with pytest.raises(ValueError, match="stamp_ns"):
        average_rollouts([a, upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), stamp_ns=2)])
    with pytest.raises(ValueError, match="sample times"):
        average_rollouts([a, upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), dt=0.5, stamp_ns=1)])


def test_average_waypoint_rollouts_upsamples_each_then_averages():
    rollouts = np.stack([np.outer([1, 2, 3, 4, 5], [10.0, dy]) for dy in (-1.0, 0.0, 2.0)])
    start = KinematicState(10.0)
    result = average_waypoint_rollouts(rollouts, start=start, stamp_ns=3)
    expected = average_rollouts([upsample(w, start=start, stamp_ns=3) for w in rollouts])
    assert_same_trajectory(result.mean, expected.mean)
    np.testing.assert_allclose(result.spread, expected.spread)
    with pytest.raises(ValueError, match=r"\(N, 5, 2\)"):
        average_waypoint_rollouts(rollouts[0])


# ---- consensus filter ---------------------------------------------------------------------


def _straight(speed: float) -> np.ndarray:
    """(5, 2) waypoints at t = 1..5 s of a straight drive at `speed`."""
    t = np.arange(1, 6, dtype=np.float64)
    return np.stack([speed * t, np.zeros(5)], axis=-1)


def test_consensus_drops_a_wrong_leading_digit():
    rollouts = np.stack([_straight(20.0), _straight(20.4), _straight(19.8), _straight(20.1)])
    rollouts[2, 0, 0] += 100.0  # "+120.00" where "+020.00" was meant
    kept = consensus_rollouts(rollouts, 5.0)
    assert kept.tolist() == [0, 1, 3]


def test_consensus_keeps_all_when_disabled_or_too_few_to_judge():
    rollouts = np.stack([_straight(20.0), _straight(40.0), _straight(20.0)])
    assert consensus_rollouts(rollouts, 0.0).tolist() == [0, 1, 2]
    assert consensus_rollouts(rollouts[:2], 5.0).tolist() == [0, 1]


def test_consensus_never_empty():
    rollouts = np.stack([_straight(10.0), _straight(20.0), _straight(30.0)])
    # every rollout is >= 10 m from the median at 1 s or later, except the median itself
    assert consensus_rollouts(rollouts, 1.0).tolist() == [1]
    spread = np.stack([_straight(10.0), _straight(20.0), _straight(30.0), _straight(40.0)])
    kept = consensus_rollouts(spread, 1.0)
    assert kept.size == 1 and kept[0] in (1, 2)
