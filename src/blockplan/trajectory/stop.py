"""A comfortable stop from the current state, following the current curvature.

Longitudinally, the arc length s(t) is the jerk-optimal stop: the JMT from (0, v0, a0) to
(D, 0, 0) over T with the stopping distance D left free. Minimising ∫ jerk² with a free end
position adds the natural boundary condition s⁽⁵⁾(T) = 0, i.e. c5 = 0, which fixes

    D = v0 T / 2 + a0 T² / 12.

With u = t / T the acceleration is then a(u) = a0 (1 − 4u + 3u²) − (6 v0 / T) u (1 − u)
and the speed v(u) = v0 (1 − 3u² + 2u³) + a0 T u (1 − u)². T is the shortest duration for
which the stop never brakes harder than max(deceleration, −a0), never reverses, and (when
`max_jerk` is given) keeps |jerk| <= max_jerk; if no duration meets the jerk limit it is
dropped, and if braking already so hard that any stop would reverse, a0 is taken as 0.
Laterally the vehicle follows a circle of the current curvature (straight if 0).
"""

from __future__ import annotations

import math

import numpy as np

from blockplan.trajectory.curve import arc
from blockplan.trajectory.frames import KinematicState
from blockplan.trajectory.jmt import evaluate_quintic, quintic_coefficients
from blockplan.trajectory.kinematics import sample_times
from blockplan.types import Trajectory

_STOPPED_SPEED = 1e-6  # m/s: a state this slow is already at rest
_DURATION_GRID_S = np.geomspace(1e-2, 1e3, 241)  # candidate stop durations, ~5% apart
_REFINEMENTS = 3  # each refinement narrows the bracket ~240×
_TOLERANCE = 1e-9


def _min_quadratic(c0: float, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """min over u in [0, 1] of c0 + c1 u + c2 u², for arrays of (c1, c2)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(c2 > 0, -c1 / (2 * c2), 0.0)
    vertex = np.clip(np.nan_to_num(vertex), 0.0, 1.0)
    return np.minimum.reduce([np.full_like(c1, c0), c0 + c1 + c2, c0 + (c1 + c2 * vertex) * vertex])


def _profiles_ok(
    v0: float, a0: float, durations: np.ndarray, max_decel: float, max_jerk: float | None
) -> np.ndarray:
    """(M,) whether the stop of each duration (M,) meets the limits."""
    T = durations
    # a(u) = a0 + B u + C u² (quadratic in u = t / T).
    b = -4 * a0 - 6 * v0 / T
    c = 3 * a0 + 6 * v0 / T
    ok = _min_quadratic(a0, b, c) >= -max_decel - _TOLERANCE
    # v(u) is cubic with v' = T a(u): its minimum is at u = 0, 1 or a root of a(u).
    disc = np.maximum(b * b - 4 * c * a0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        roots = [(-b - np.sqrt(disc)) / (2 * c), (-b + np.sqrt(disc)) / (2 * c)]
    for u in (np.ones_like(T), *(np.clip(np.nan_to_num(r), 0.0, 1.0) for r in roots)):
        speed = v0 * (1 - 3 * u**2 + 2 * u**3) + a0 * T * u * (1 - u) ** 2
        ok &= speed >= -_TOLERANCE
    if max_jerk is not None:
        # jerk = (B + 2 C u) / T is linear in u: extremes at the ends.
        ok &= np.maximum(np.abs(b), np.abs(b + 2 * c)) / T <= max_jerk + _TOLERANCE
    return ok


def _shortest_duration(
    v0: float, a0: float, max_decel: float, max_jerk: float | None
) -> float | None:
    """The first duration on the grid meeting the limits, refined on finer grids between it
    and its predecessor."""
    grid = _DURATION_GRID_S
    ok = _profiles_ok(v0, a0, grid, max_decel, max_jerk)
    if not ok.any():
        return None
    for _ in range(_REFINEMENTS):
        k = int(np.argmax(ok))
        if k == 0:
            break
        grid = np.linspace(grid[k - 1], grid[k], len(_DURATION_GRID_S))
        ok = _profiles_ok(v0, a0, grid, max_decel, max_jerk)
    return float(grid[int(np.argmax(ok))])


def stop_duration(
    v0: float, a0: float, deceleration: float, max_jerk: float | None = None
) -> tuple[float, float]:
    """The stop's duration T (s) and the initial acceleration it starts from (a0, or 0 if a0
    had to be dropped); see the module docstring."""
    if not (math.isfinite(deceleration) and deceleration > 0):
        raise ValueError(f"deceleration={deceleration!r}: must be a finite number > 0")
    max_decel = max(deceleration, -a0)
    for jerk_limit in (max_jerk, None):
        duration = _shortest_duration(v0, a0, max_decel, jerk_limit)
        if duration is not None:
            return duration, a0
    return 1.5 * v0 / deceleration, 0.0  # a0 = 0: peak deceleration 1.5 v0 / T


def stop_trajectory(
    state: KinematicState,
    deceleration: float,
    dt: float = 0.25,
    horizon_s: float = 5.0,
    stamp_ns: int = 0,
    max_jerk: float | None = None,
) -> Trajectory:
    """A stop from `state` (ego frame at `stamp_ns`: origin, heading 0) braking at most
    `deceleration` m/s² (or the current, harder braking), along the current curvature,
    sampled at dt … horizon_s. The vehicle stays at rest once stopped."""
    t = sample_times(dt, horizon_s)  # (P,)
    v0, kappa = state.v, state.curvature
    if v0 <= _STOPPED_SPEED:
        s = np.zeros_like(t)
        speed = np.zeros_like(t)
        accel = np.zeros_like(t)
    else:
        duration, a0 = stop_duration(v0, state.a, deceleration, max_jerk)
        distance = v0 * duration / 2 + a0 * duration**2 / 12
        coeffs = quintic_coefficients(0.0, v0, a0, distance, 0.0, 0.0, duration)  # (6,)
        s, speed, accel, _ = evaluate_quintic(coeffs, np.minimum(t, duration))
        stopped = t >= duration
        s = np.where(stopped, distance, s)
        speed = np.where(stopped, 0.0, np.maximum(speed, 0.0))
        accel = np.where(stopped, 0.0, accel)
    x, y, yaw = arc(s, kappa)
    return Trajectory(
        stamp_ns=int(stamp_ns),
        t=t,
        x=x,
        y=y,
        yaw=yaw,
        speed=speed,
        accel=accel,
        curvature=np.full_like(t, kappa),
    )
