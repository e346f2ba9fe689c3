"""The comfortable stop: bounded braking, no reversing, follows the curvature, passes gates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from blockplan.config import GateConfig
from blockplan.trajectory import KinematicState, check_gates, stop_trajectory
from blockplan.trajectory.stop import stop_duration

GATES = GateConfig()
states = st.builds(
    KinematicState,
    v=st.floats(0.0, 40.0),
    a=st.floats(-4.0, 2.4),
    curvature=st.floats(-0.2, 0.2),
)


@settings(deadline=None)
@given(states, st.floats(0.5, 4.0))
def test_stop_is_bounded_and_never_reverses(state, deceleration):
    duration, _ = stop_duration(state.v, state.a, deceleration)
    horizon_s = np.ceil(duration) + 1.0
    traj = stop_trajectory(state, deceleration, dt=0.1, horizon_s=horizon_s, stamp_ns=5)
    assert traj.stamp_ns == 5 and len(traj.t) == round(10 * horizon_s)
    assert np.all(traj.speed >= 0.0)
    assert traj.accel.min() >= -max(deceleration, -state.a) - 1e-6
    assert traj.speed[-1] == 0.0 and traj.accel[-1] == 0.0  # at rest, and stays there
    stopped = np.flatnonzero(traj.speed == 0.0)[0]
    np.testing.assert_allclose(traj.xy[stopped:] - traj.xy[-1], 0.0, atol=1e-12)


@settings(deadline=None)
@given(states, st.floats(0.5, 4.0))
def test_stop_follows_the_current_curvature(state, deceleration):
    assume(abs(state.curvature) > 1e-3)
    traj = stop_trajectory(state, deceleration, dt=0.25, horizon_s=5.0)
    np.testing.assert_allclose(traj.curvature, state.curvature)
    radius = 1.0 / state.curvature
    np.testing.assert_allclose(np.hypot(traj.x, traj.y - radius), abs(radius), rtol=1e-9)
    # The heading is the tangent of the circle: yaw = κ · arc length.
    arc_length = np.hypot(traj.x, traj.y)  # chord; equal to the arc for small angles
    small = np.abs(traj.yaw) < 0.05
    np.testing.assert_allclose(traj.yaw[small], state.curvature * arc_length[small], atol=1e-4)


@settings(deadline=None)
@given(
    st.floats(2.0, 40.0),
    st.floats(-2.0, 0.0),  # accelerating first raises the speed, and so the yaw rate
    st.floats(-1.0, 1.0),
    st.floats(1.0, 3.0),
)
def test_stop_from_a_comfortable_state_passes_the_gates(speed, accel, turn, deceleration):
    # Curvature inside the lateral-acceleration and yaw-rate limits at this speed.
    curvature = turn * min(GATES.max_lateral_accel / speed**2, GATES.max_yaw_rate / speed)
    state = KinematicState(v=speed, a=accel, curvature=curvature)
    traj = stop_trajectory(state, deceleration, max_jerk=GATES.max_abs_jerk, horizon_s=30.0)
    report = check_gates(traj, GATES)
    assert report.ok, report.summary()


def test_straight_stop_by_hand():
    # From 10 m/s with a0 = 0 and 2 m/s²: T = 1.5 v0 / d = 7.5 s, distance v0 T / 2 = 37.5 m,
    # peak deceleration exactly 2 m/s² at T / 2.
    duration, a0 = stop_duration(10.0, 0.0, 2.0)
    assert duration == pytest.approx(7.5, rel=1e-6) and a0 == 0.0
    traj = stop_trajectory(KinematicState(10.0), 2.0, dt=0.25, horizon_s=10.0)
    assert traj.accel.min() == pytest.approx(-2.0, abs=1e-5)
    assert traj.x[-1] == pytest.approx(37.5, rel=1e-5)
    np.testing.assert_allclose(traj.y, 0.0, atol=1e-12)
    assert np.all(np.diff(traj.speed) <= 1e-12)


def test_standing_still_stays_still():
    traj = stop_trajectory(KinematicState(0.0, a=1.0, curvature=0.1), 2.0)
    np.testing.assert_allclose(traj.xy, 0.0)
    np.testing.assert_allclose(traj.speed, 0.0)


def test_bad_deceleration_is_rejected():
    with pytest.raises(ValueError, match="deceleration"):
        stop_trajectory(KinematicState(5.0), 0.0)
