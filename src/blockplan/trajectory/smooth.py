"""The published path: a jerk-minimizing fit of the model's 5 waypoints within a tolerance.

The WOD-E2E protocol (`upsample`) interpolates the waypoints exactly with knot velocities and
accelerations from finite differences, so 0.5 m of waypoint noise becomes tens of m/s³ of
jerk, which a controller would have to follow. For what is sent to control we fit instead:

    minimise  ∫₀⁵ |jerk(t)|² dt   subject to   |p(k) − w_k| ≤ tolerance_m,  k = 1..5

over C2 piecewise quintics with knots at t = 0..5 s (free knot velocities and accelerations)
starting at the origin, p(0) = 0 (the ego at t0). The velocity and acceleration at t0 are
left free, as the WOD protocol estimates them from the waypoints: the stitch joins the
published path from the commanded state. (Forcing v_y(0) = 0 was tried: the fit then slows
down into a turn at t0 and the simulator expert's roundabout entries fail more gates.) The knot states are the solution of the
penalised problem  ∫|jerk|² + μ Σ_k |p(k) − w_k|²  (a linear system, both axes at once) with
the smallest μ whose every waypoint lies within the tolerance (bisection on log μ): the
smoothest fit of that family within the tolerance. A path that needs no jerk (constant
acceleration, e.g. constant velocity or a steady braking) is reproduced exactly. Tolerance 0
gives the WOD-E2E protocol itself (the metrics' interpolation).

The knots then define a `StateCurve` (the same piecewise quintic), sampled like `upsample`.
"""

from __future__ import annotations

import functools

import numpy as np

from blockplan.trajectory.curve import StateCurve
from blockplan.trajectory.kinematics import sample_times, trajectory_from_states
from blockplan.trajectory.upsample import _check_waypoints, upsample
from blockplan.types import NUM_WAYPOINTS, WAYPOINT_PERIOD_S, Trajectory

_NUM_KNOTS = NUM_WAYPOINTS + 1  # t = 0 and the 5 waypoints
_LOG_MU_RANGE = (-6.0, 10.0)  # penalty weights searched (log10), per m² against m²/s⁵
_BISECTION_STEPS = 24
_TOLERANCE_SLACK = 1e-9  # m: float round-off in the feasibility test


@functools.lru_cache(maxsize=1)
def _jerk_energy() -> np.ndarray:
    """(18, 18) Q with ∫₀⁵ |jerk|² dt = xᵀ Q x per axis, x = (p₀..p₅, v₀..v₅, a₀..a₅)."""
    # Jerk of the JMT from (p0, v0, a0) to (p1, v1, a1) over T = 1 as a linear map of those
    # six values, at 3 Gauss-Legendre nodes (exact: jerk² is a quartic in τ).
    nodes, weights = np.polynomial.legendre.leggauss(3)
    tau, w = 0.5 * (nodes + 1.0) * WAYPOINT_PERIOD_S, 0.5 * weights * WAYPOINT_PERIOD_S
    T = WAYPOINT_PERIOD_S
    # c3, c4, c5 of `quintic_coefficients` as rows over (p0, v0, a0, p1, v1, a1)
    c3 = np.array([-20, -12 * T, -3 * T**2, 20, -8 * T, T**2]) / (2 * T**3)
    c4 = np.array([30, 16 * T, 3 * T**2, -30, 14 * T, -2 * T**2]) / (2 * T**4)
    c5 = np.array([-12, -6 * T, -(T**2), 12, -6 * T, T**2]) / (2 * T**5)
    jerk = 6 * c3[None] + 24 * c4[None] * tau[:, None] + 60 * c5[None] * tau[:, None] ** 2
    local = jerk.T @ (w[:, None] * jerk)  # (6, 6)
    n = _NUM_KNOTS
    q = np.zeros((3 * n, 3 * n))
    for k in range(n - 1):
        idx = [k, n + k, 2 * n + k, k + 1, n + k + 1, 2 * n + k + 1]
        q[np.ix_(idx, idx)] += local
    return q


@functools.lru_cache(maxsize=1)
def _reduced() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The energy of one axis as a function of the waypoint positions p₁..p₅ alone:
    minimising over the knot velocities and accelerations r gives r = R p and energy pᵀ S p,
    S = U diag(λ) Uᵀ (p₀ = 0 is fixed). Returns (R (12, 5), U (5, 5), λ (5,))."""
    q = _jerk_energy()[1:, 1:]  # drop p₀'s row and column
    m = NUM_WAYPOINTS
    qpp, qpr, qrr = q[:m, :m], q[:m, m:], q[m:, m:]
    r = -np.linalg.solve(qrr, qpr.T)  # (12, 5)
    lam, u = np.linalg.eigh(qpp + qpr @ r)
    # The jerk-free paths (quadratics through the origin) span the null space: exactly 0,
    # so that they are reproduced exactly at any μ.
    lam = np.where(lam < 1e-9 * lam.max(), 0.0, lam)
    return r, u, lam


def _solve(waypoints: np.ndarray, mu: float) -> np.ndarray:
    """(18, 2) knot states (p₀..p₅, v₀..v₅, a₀..a₅ per axis) of the penalised fit, p₀ = 0:
    p = U diag(μ / (λ + μ)) Uᵀ w, then r = R p (both axes at once)."""
    r, u, lam = _reduced()
    p = u @ ((mu / (lam + mu))[:, None] * (u.T @ waypoints))  # (5, 2)
    return np.concatenate([np.zeros((1, 2)), p, r @ p])


def fit_knots(
    waypoints: np.ndarray, tolerance_m: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fit's knots: times (6,), positions, velocities, accelerations (6, 2) each."""
    wp = _check_waypoints(waypoints)
    if not tolerance_m >= 0:
        raise ValueError(f"tolerance_m={tolerance_m!r}: must be >= 0")

    def deviation(x: np.ndarray) -> float:
        return float(np.linalg.norm(x[1:_NUM_KNOTS] - wp, axis=-1).max())

    lo, hi = _LOG_MU_RANGE
    best = _solve(wp, 10.0**hi)
    if deviation(best) <= tolerance_m + _TOLERANCE_SLACK:
        for _ in range(_BISECTION_STEPS):  # smallest μ that is still within the tolerance
            mid = 0.5 * (lo + hi)
            x = _solve(wp, 10.0**mid)
            if deviation(x) <= tolerance_m + _TOLERANCE_SLACK:
                hi, best = mid, x
            else:
                lo = mid
    n = _NUM_KNOTS
    times = WAYPOINT_PERIOD_S * np.arange(n, dtype=np.float64)
    return times, best[:n], best[n : 2 * n], best[2 * n :]


def smooth_upsample(
    waypoints: np.ndarray,
    tolerance_m: float,
    dt: float = 0.25,
    horizon_s: float = 5.0,
    stamp_ns: int = 0,
) -> Trajectory:
    """The jerk-minimizing fit of (5, 2) waypoints within `tolerance_m` (see the module
    docstring), sampled at dt … horizon_s like `upsample`; tolerance 0: `upsample` itself."""
    if tolerance_m == 0:
        return upsample(waypoints, dt=dt, horizon_s=horizon_s, stamp_ns=stamp_ns)
    times, pos, vel, acc = fit_knots(waypoints, tolerance_m)
    t = sample_times(dt, horizon_s)
    p, v, a = StateCurve(times, pos, vel, acc).evaluate(t)
    return trajectory_from_states(stamp_ns, t, p, v, a)
