"""Jerk-minimizing trajectories (JMT): quintic polynomials with fixed end states.

Minimising ∫ jerk² over [0, T] with position, velocity and acceleration fixed at both ends
gives a quintic x(τ) = Σ c_k τ^k per axis (docs/ALGORITHMS.md §5). With Δ = xf − x0:

    c0 = x0,  c1 = v0,  c2 = a0 / 2
    c3 = [20Δ − (8 vf + 12 v0) T − (3 a0 − af) T²] / (2 T³)
    c4 = [−30Δ + (14 vf + 16 v0) T + (3 a0 − 2 af) T²] / (2 T⁴)
    c5 = [12Δ − 6 (vf + v0) T + (af − a0) T²] / (2 T⁵)

A quintic is fixed by its six boundary values, so the JMT between two states of another
quintic reproduces that quintic exactly — the reason stitching at t0 is the identity.
"""

from __future__ import annotations

import numpy as np


def quintic_coefficients(x0, v0, a0, xf, vf, af, T) -> np.ndarray:
    """Coefficients (c0 … c5) of the JMT from (x0, v0, a0) at τ = 0 to (xf, vf, af) at τ = T.

    Arguments broadcast (numpy); the result has shape broadcast(inputs) + (6,), so scalar
    inputs give (6,). T must be > 0.
    """
    x0, v0, a0, xf, vf, af, T = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (x0, v0, a0, xf, vf, af, T))
    )
    if np.any(~(T > 0)):
        raise ValueError(f"quintic_coefficients: T must be > 0, got {T}")
    delta = xf - x0
    c3 = (20 * delta - (8 * vf + 12 * v0) * T - (3 * a0 - af) * T**2) / (2 * T**3)
    c4 = (-30 * delta + (14 * vf + 16 * v0) * T + (3 * a0 - 2 * af) * T**2) / (2 * T**4)
    c5 = (12 * delta - 6 * (vf + v0) * T + (af - a0) * T**2) / (2 * T**5)
    return np.stack([x0, v0, a0 / 2, c3, c4, c5], axis=-1)


def evaluate_quintic(coeffs: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, ...]:
    """Position, velocity, acceleration and jerk of quintics at local times `tau`.

    coeffs: (..., 6); tau: broadcastable to coeffs.shape[:-1]. Returns four arrays of the
    broadcast shape.
    """
    c = np.asarray(coeffs, dtype=np.float64)
    tau = np.asarray(tau, dtype=np.float64)
    c0, c1, c2, c3, c4, c5 = (c[..., k] for k in range(6))
    pos = c0 + tau * (c1 + tau * (c2 + tau * (c3 + tau * (c4 + tau * c5))))
    vel = c1 + tau * (2 * c2 + tau * (3 * c3 + tau * (4 * c4 + tau * 5 * c5)))
    acc = 2 * c2 + tau * (6 * c3 + tau * (12 * c4 + tau * 20 * c5))
    jerk = 6 * c3 + tau * (24 * c4 + tau * 60 * c5)
    return pos, vel, acc, jerk
