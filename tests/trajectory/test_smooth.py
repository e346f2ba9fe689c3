"""The published path: the jerk-minimizing fit of the waypoints within a tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockplan.trajectory import fit_knots, smooth_upsample, upsample
from blockplan.trajectory.smooth import _jerk_energy

T = np.arange(1, 6, dtype=np.float64)


def max_jerk(traj) -> float:
    return float(np.abs(np.diff(traj.accel) / np.diff(traj.t)).max())


def energy(waypoints, tolerance) -> float:
    """∫|jerk|² of the fit over both axes (the quantity it minimises)."""
    _, p, v, a = fit_knots(waypoints, tolerance)
    q = _jerk_energy()
    return sum(float(x @ q @ x) for x in np.concatenate([p, v, a]).T)


@pytest.mark.parametrize(
    "waypoints",
    [
        np.stack([15.0 * T, 0 * T], -1),  # constant velocity
        np.stack([20.0 * T - 1.5 * T**2, 0 * T], -1),  # steady braking
        np.stack([10.0 * T, 0.3 * T**2 + 0.5 * T], -1),  # constant lateral acceleration
    ],
    ids=["cruise", "braking", "drifting left"],
)
def test_paths_that_need_no_jerk_are_reproduced_exactly(waypoints):
    fit = smooth_upsample(waypoints, 0.5)
    np.testing.assert_allclose(fit.xy[3::4], waypoints, atol=1e-9)
    _, _, _, acc = fit_knots(waypoints, 0.5)
    np.testing.assert_allclose(acc, acc[:1].repeat(6, 0), atol=1e-9)  # one acceleration vector


def test_tolerance_zero_is_the_wod_protocol():
    rng = np.random.default_rng(3)
    waypoints = np.stack([12.0 * T, 0.2 * T**2], -1) + rng.normal(0, 0.5, (5, 2))
    a, b = smooth_upsample(waypoints, 0.0, dt=0.1), upsample(waypoints, dt=0.1)
    np.testing.assert_array_equal(a.xy, b.xy)
    np.testing.assert_array_equal(a.accel, b.accel)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), tolerance=st.floats(0.05, 1.0))
def test_every_waypoint_is_within_the_tolerance_and_the_path_starts_at_the_ego(seed, tolerance):
    rng = np.random.default_rng(seed)
    speed = rng.uniform(0.0, 30.0)
    waypoints = np.stack([speed * T, rng.uniform(-0.5, 0.5) * T**2], -1)
    waypoints += rng.normal(0, 1.0, (5, 2))
    times, pos, vel, acc = fit_knots(waypoints, tolerance)
    np.testing.assert_array_equal(times, np.arange(6.0))
    assert np.linalg.norm(pos[1:] - waypoints, axis=-1).max() <= tolerance + 1e-6
    assert np.array_equal(pos[0], [0.0, 0.0])


def test_half_a_metre_of_noise_does_not_become_tens_of_m_s3_of_jerk():
    """The issue's case: 0.5 m of waypoint noise on a 20 m/s cruise."""
    rng = np.random.default_rng(0)
    clean = np.stack([20.0 * T, 0 * T], -1)
    worst_wod, worst_fit = 0.0, 0.0
    for _ in range(50):
        noisy = clean + rng.uniform(-0.5, 0.5, (5, 2))
        worst_wod = max(worst_wod, max_jerk(upsample(noisy)))
        worst_fit = max(worst_fit, max_jerk(smooth_upsample(noisy, 0.15)))
    assert worst_wod > 15.0  # the WOD interpolation: about twice the comfort jerk
    assert worst_fit < 8.37  # the default fit (0.15 m): within the comfort jerk


def test_a_larger_tolerance_gives_a_smoother_path():
    rng = np.random.default_rng(1)
    waypoints = np.stack([10.0 * T, 0.5 * T**2], -1) + rng.normal(0, 0.7, (5, 2))
    energies = [energy(waypoints, tol) for tol in (0.05, 0.2, 0.5, 1.0)]
    assert all(a >= b for a, b in zip(energies, energies[1:], strict=False))
    assert energies[-1] < 0.5 * energies[0]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="tolerance_m"):
        fit_knots(np.zeros((5, 2)), -0.1)
    with pytest.raises(ValueError, match="finite"):
        smooth_upsample(np.full((5, 2), np.nan), 0.5)
