"""Quintic JMT coefficients: hand-computed regression and boundary-condition properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockplan.trajectory import evaluate_quintic, quintic_coefficients

finite = st.floats(-50.0, 50.0, allow_nan=False)
durations = st.floats(0.05, 10.0, allow_nan=False)


def test_rest_to_rest_unit_step_is_the_classic_10_15_6():
    # x(τ) = 10τ³ − 15τ⁴ + 6τ⁵ for a unit move in unit time from rest to rest.
    np.testing.assert_allclose(
        quintic_coefficients(0, 0, 0, 1, 0, 0, 1), [0, 0, 0, 10, -15, 6], atol=1e-12
    )


def test_coefficients_match_hand_computation():
    # x0=1, v0=2, a0=4, xf=10, vf=3, af=-2, T=2, Δ=9, worked by hand:
    # c3 = [180 − (24 + 24)·2 − (12 + 2)·4] / 16 = 28/16 = 1.75
    # c4 = [−270 + (42 + 32)·2 + (12 + 4)·4] / 32 = −58/32 = −1.8125
    # c5 = [108 − 6·5·2 + (−2 − 4)·4] / 64 = 24/64 = 0.375
    coeffs = quintic_coefficients(1.0, 2.0, 4.0, 10.0, 3.0, -2.0, 2.0)
    np.testing.assert_allclose(coeffs, [1.0, 2.0, 2.0, 1.75, -1.8125, 0.375], atol=1e-12)
    pos, vel, acc, jerk = evaluate_quintic(coeffs, 2.0)
    # x(2) = 1 + 4 + 8 + 14 − 29 + 12; v(2) = 2 + 8 + 21 − 58 + 30; a(2) = 4 + 21 − 87 + 60
    assert (pos, vel, acc) == pytest.approx((10.0, 3.0, -2.0), abs=1e-12)
    assert jerk == pytest.approx(6 * 1.75 - 24 * 1.8125 * 2 + 60 * 0.375 * 4, abs=1e-12)


def test_coefficients_broadcast():
    coeffs = quintic_coefficients(np.zeros((3, 2)), 1.0, 0.0, np.ones((3, 2)), 1.0, 0.0, 1.0)
    assert coeffs.shape == (3, 2, 6)
    np.testing.assert_allclose(coeffs[..., :2], np.broadcast_to([0.0, 1.0], (3, 2, 2)))


def test_non_positive_duration_is_rejected():
    with pytest.raises(ValueError, match="T must be > 0"):
        quintic_coefficients(0, 0, 0, 1, 0, 0, 0.0)


@settings(deadline=None)
@given(finite, finite, finite, finite, finite, finite, durations)
def test_boundary_states_hold(x0, v0, a0, xf, vf, af, T):
    coeffs = quintic_coefficients(x0, v0, a0, xf, vf, af, T)
    start = evaluate_quintic(coeffs, 0.0)[:3]
    end = evaluate_quintic(coeffs, T)[:3]
    scale = 1.0 + max(abs(x0), abs(xf), abs(v0), abs(vf), abs(a0), abs(af))
    np.testing.assert_allclose(start, (x0, v0, a0), atol=1e-9 * scale)
    np.testing.assert_allclose(end, (xf, vf, af), atol=1e-7 * scale / min(T, 1.0) ** 2)


@settings(deadline=None)
@given(finite, finite, finite, durations)
def test_a_quintic_is_reproduced_from_its_own_end_states(c3, c4, c5, T):
    # A quintic is fixed by its 6 boundary values: the JMT between two of its states is itself.
    original = np.array([0.5, -1.0, 0.25, c3 / 10, c4 / 100, c5 / 1000])
    start = evaluate_quintic(original, 0.0)[:3]
    end = evaluate_quintic(original, T)[:3]
    refit = quintic_coefficients(*start, *end, T)
    tau = np.linspace(0.0, T, 7)
    np.testing.assert_allclose(
        evaluate_quintic(refit, tau)[0], evaluate_quintic(original, tau)[0], rtol=1e-7, atol=1e-7
    )
