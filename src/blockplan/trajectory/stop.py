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
_U_GRID = np.linspace(0.0, 1.0, 201)  # normalised time for the no-reversing check
_BISECTION_STEPS = 40
_TOLERANCE = 1e-9


def _profile_ok(
    v0: float, a0: float, duration: float, max_decel: float, max_jerk: float | None
) -> bool:
    u = _U_GRID
    accel = a0 * (1 - 4 * u + 3 * u**2) - (6 * v0 / duration) * u * (1 - u)
    speed = v0 * (1 - 3 * u**2 + 2 * u**3) + a0 * duration * u * (1 - u) ** 2
    if accel.min() < -max_decel - _TOLERANCE or speed.min() < -_TOLERANCE:
        return False
    if max_jerk is not None:
        jerk_start = (-4 * a0 - 6 * v0 / duration) / duration  # jerk is linear in u
        jerk_end = (2 * a0 + 6 * v0 / duration) / duration
        if max(abs(jerk_start), abs(jerk_end)) > max_jerk + _TOLERANCE:
            return False
    return True


def _shortest_duration(
    v0: float, a0: float, max_decel: float, max_jerk: float | None
) -> float | None:
    ok = [_profile_ok(v0, a0, T, max_decel, max_jerk) for T in _DURATION_GRID_S]
    if not any(ok):
        return None
    k = ok.index(True)
    if k == 0:
        return float(_DURATION_GRID_S[0])
    lo, hi = float(_DURATION_GRID_S[k - 1]), float(_DURATION_GRID_S[k])
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _profile_ok(v0, a0, mid, max_decel, max_jerk) else (mid, hi)
    return hi


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
