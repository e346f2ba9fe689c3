"""JMT upsampling: the WOD-E2E protocol against an independent implementation, and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from blockplan.trajectory import (
    MIN_SPEED_FOR_HEADING,
    KinematicState,
    StateCurve,
    constant_velocity_waypoints,
    knot_states,
    upsample,
)

waypoint_arrays = arrays(np.float64, (5, 2), elements=st.floats(-80.0, 80.0, allow_nan=False))
start_states = st.builds(
    KinematicState,
    v=st.floats(0.0, 30.0),
    a=st.floats(-4.0, 3.0),
    curvature=st.floats(-0.2, 0.2),
)


def reference_wod_upsample(waypoints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An independent reading of the WOD-E2E protocol: explicit finite differences and one
    6×6 boundary-value system per 1 s segment and axis, solved with numpy.linalg.solve.
    Returns positions and velocities (20, 2) at t = 0.25 … 5.0."""
    knots = [np.zeros(2)] + [np.asarray(w, dtype=float) for w in waypoints]  # t = 0..5

    def differences(values):
        n = len(values)
        out = []
        for i in range(n):
            if i == 0:
                out.append(values[1] - values[0])
            elif i == n - 1:
                out.append(values[n - 1] - values[n - 2])
            else:
                out.append((values[i + 1] - values[i - 1]) / 2.0)
        return out

    vels = differences(knots)
    accs = differences(vels)
    T = 1.0
    system = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [0, 1, 0, 0, 0, 0],
            [0, 0, 2, 0, 0, 0],
            [1, T, T**2, T**3, T**4, T**5],
            [0, 1, 2 * T, 3 * T**2, 4 * T**3, 5 * T**4],
            [0, 0, 2, 6 * T, 12 * T**2, 20 * T**3],
        ],
        dtype=float,
    )
    positions, velocities = [], []
    for k in range(1, 21):
        t = 0.25 * k
        seg = min(int(math.ceil(t)) - 1, 4)
        tau = t - seg
        point, velocity = [], []
        for axis in range(2):
            rhs = [
                knots[seg][axis],
                vels[seg][axis],
                accs[seg][axis],
                knots[seg + 1][axis],
                vels[seg + 1][axis],
                accs[seg + 1][axis],
            ]
            c = np.linalg.solve(system, rhs)
            point.append(np.polynomial.polynomial.polyval(tau, c))
            velocity.append(
                np.polynomial.polynomial.polyval(tau, np.polynomial.polynomial.polyder(c))
            )
        positions.append(point)
        velocities.append(velocity)
    return np.array(positions), np.array(velocities)


def test_acceptance_straight_10_mps():
    traj = upsample([[10, 0], [20, 0], [30, 0], [40, 0], [50, 0]])
    assert len(traj.t) == 20
    np.testing.assert_allclose(traj.t, 0.25 * np.arange(1, 21))
    np.testing.assert_allclose(traj.x, 2.5 * np.arange(1, 21), atol=1e-12)
    np.testing.assert_allclose(traj.y, 0.0, atol=1e-12)
    assert (traj.x[0], traj.x[-1]) == pytest.approx((2.5, 50.0))
    np.testing.assert_allclose(traj.speed, 10.0, atol=1e-12)
    np.testing.assert_allclose(traj.yaw, 0.0, atol=1e-12)
    np.testing.assert_allclose(traj.accel, 0.0, atol=1e-12)
    np.testing.assert_allclose(traj.curvature, 0.0, atol=1e-12)


def test_acceptance_curved_matches_independent_reference():
    waypoints = np.array([[9.8, 0.3], [19.1, 1.9], [27.4, 5.2], [33.9, 10.8], [37.2, 18.1]])
    traj = upsample(waypoints)
    ref_pos, ref_vel = reference_wod_upsample(waypoints)
    np.testing.assert_allclose(traj.xy, ref_pos, atol=1e-6, rtol=0)
    np.testing.assert_allclose(traj.speed, np.linalg.norm(ref_vel, axis=1), atol=1e-6, rtol=0)
    np.testing.assert_allclose(traj.yaw, np.arctan2(ref_vel[:, 1], ref_vel[:, 0]), atol=1e-6)


@settings(deadline=None, max_examples=50)
@given(waypoint_arrays)
def test_random_waypoints_match_independent_reference(waypoints):
    ref_pos, _ = reference_wod_upsample(waypoints)
    np.testing.assert_allclose(upsample(waypoints).xy, ref_pos, atol=1e-6, rtol=0)


@settings(deadline=None)
@given(waypoint_arrays, st.one_of(st.none(), start_states))
def test_passes_through_every_knot(waypoints, start):
    traj = upsample(waypoints, start=start)
    at_knots = traj.xy[[3, 7, 11, 15, 19]]  # t = 1, 2, 3, 4, 5 s
    np.testing.assert_allclose(at_knots, waypoints, atol=1e-9 * (1 + np.abs(waypoints).max()))


@settings(deadline=None)
@given(waypoint_arrays, st.one_of(st.none(), start_states))
def test_velocity_and_acceleration_hold_at_every_knot(waypoints, start):
    times, pos, vel, acc = knot_states(waypoints, start)
    if start is not None:
        np.testing.assert_allclose(vel[0], start.velocity)
        np.testing.assert_allclose(acc[0], start.acceleration)
    curve = StateCurve(times, pos, vel, acc)
    # The curve's derivatives scale with the knots *and* the start state (a fast start into
    # waypoints at the origin is a steep quintic), so both set the tolerance.
    scale = 1.0 + max(np.abs(waypoints).max(), np.abs(vel).max(), np.abs(acc).max())
    eps = 1e-6
    for side in (-eps, 0.0, eps):  # left limit, the knot, right limit: C2 across knots
        t = np.clip(times + side, 0.0, 5.0)
        p, v, a = curve.evaluate(t)
        np.testing.assert_allclose(p, pos, atol=1e-9 * scale + 10 * abs(side) * scale)
        np.testing.assert_allclose(v, vel, atol=1e-9 * scale + 1e2 * abs(side) * scale)
        np.testing.assert_allclose(a, acc, atol=1e-8 * scale + 1e3 * abs(side) * scale)


@settings(deadline=None)
@given(st.floats(-30.0, 30.0), st.floats(-30.0, 30.0), st.booleans())
def test_constant_velocity_waypoints_give_straight_constant_speed(vx, vy, with_start):
    state = KinematicState(v=float(np.hypot(vx, vy)), vx=vx, vy=vy, ax=0.0, ay=0.0)
    waypoints = constant_velocity_waypoints(state)
    np.testing.assert_allclose(waypoints, np.outer([1, 2, 3, 4, 5], [vx, vy]), atol=1e-12)
    traj = upsample(waypoints, start=state if with_start else None)
    tol = 1e-9 * (1 + state.v)
    np.testing.assert_allclose(traj.xy, np.outer(traj.t, [vx, vy]), atol=tol)
    np.testing.assert_allclose(traj.speed, state.v, atol=tol)
    np.testing.assert_allclose(traj.accel, 0.0, atol=tol)
    np.testing.assert_allclose(traj.curvature, 0.0, atol=1e-9)
    expected_yaw = math.atan2(vy, vx) if state.v >= MIN_SPEED_FOR_HEADING else 0.0
    yaw_error = np.remainder(traj.yaw - expected_yaw + math.pi, 2 * math.pi) - math.pi
    np.testing.assert_allclose(yaw_error, 0.0, atol=1e-9)  # ±π are one heading


def test_yaw_is_held_while_stopped_and_not_unwrapped_wrongly():
    # Drive 5 m forward in 1 s, then stand still: the heading while stopped keeps the last one.
    waypoints = np.array([[5.0, 0.5], [6.0, 1.0], [6.0, 1.0], [6.0, 1.0], [6.0, 1.0]])
    traj = upsample(waypoints)
    slow = traj.speed < MIN_SPEED_FOR_HEADING
    assert slow[-1] and not slow[0]
    last_moving = np.flatnonzero(~slow)[-1]
    np.testing.assert_allclose(
        traj.yaw[slow & (np.arange(20) > last_moving)], traj.yaw[last_moving]
    )
    assert np.all(np.isfinite(traj.curvature))


def test_custom_grid_and_stamp():
    traj = upsample(np.outer([1, 2, 3, 4, 5], [3.0, 0.0]), dt=0.1, horizon_s=5.0, stamp_ns=42)
    assert traj.stamp_ns == 42 and len(traj.t) == 50
    assert traj.t[-1] == pytest.approx(5.0)


def test_horizon_beyond_the_last_waypoint_continues_the_motion():
    traj = upsample(np.outer([1, 2, 3, 4, 5], [3.0, 0.0]), horizon_s=6.0)
    assert len(traj.t) == 24
    np.testing.assert_allclose(traj.x[-4:], 3.0 * traj.t[-4:], atol=1e-9)


@pytest.mark.parametrize(
    "bad, match",
    [(np.zeros((4, 2)), r"\(5, 2\)"), (np.full((5, 2), np.nan), "finite")],
)
def test_bad_waypoints_are_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        upsample(bad)


def test_bad_grid_is_rejected():
    with pytest.raises(ValueError, match="dt"):
        upsample(np.zeros((5, 2)), dt=0.0)
    with pytest.raises(ValueError, match="horizon_s"):
        upsample(np.zeros((5, 2)), dt=0.5, horizon_s=0.25)
