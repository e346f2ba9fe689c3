"""A continuous planar curve through timed kinematic states (piecewise quintic Hermite).

Given K states (time, position, velocity, acceleration) the curve is the JMT between each
pair of neighbours: C2-continuous, and exact when the states were sampled from piecewise
quintics whose pieces each contain the sampling interval (e.g. a JMT-upsampled plan). Outside
the knots it extrapolates:

* before the first knot with that knot's velocity and acceleration (a parabola);
* after the last knot along a circular arc of the last curvature, keeping the last
  longitudinal acceleration; a decelerating extension stops and then stays still.
"""

from __future__ import annotations

import math

import numpy as np

from blockplan.trajectory.frames import MIN_SPEED_FOR_HEADING, rotation
from blockplan.trajectory.jmt import evaluate_quintic, quintic_coefficients


def arc(s: np.ndarray, curvature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point and heading after arc length `s` (M,) along a circle of `curvature` that starts
    at the origin heading +x. Returns x, y, heading, each (M,); stable as curvature → 0."""
    s = np.asarray(s, dtype=np.float64)
    theta = curvature * s
    x = s * np.sinc(theta / math.pi)  # sin(θ)/κ
    y = s * np.sin(theta / 2) * np.sinc(theta / (2 * math.pi))  # (1 − cos θ)/κ
    return x, y, theta


def unit(heading: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(M, 2) unit tangents and left normals of headings (M,)."""
    tangent = np.stack([np.cos(heading), np.sin(heading)], axis=-1)
    normal = np.stack([-np.sin(heading), np.cos(heading)], axis=-1)
    return tangent, normal


class StateCurve:
    """Piecewise-quintic curve through states; see the module docstring.

    times (K,) strictly increasing; pos, vel, acc (K, 2). `end_heading` / `end_curvature`
    override the heading and curvature used by the extension after the last knot (needed when
    the last knot is below `MIN_SPEED_FOR_HEADING`, where the velocity carries no heading).
    """

    def __init__(
        self,
        times: np.ndarray,
        pos: np.ndarray,
        vel: np.ndarray,
        acc: np.ndarray,
        end_heading: float | None = None,
        end_curvature: float | None = None,
    ) -> None:
        self.times = np.asarray(times, dtype=np.float64)  # (K,)
        self.pos = np.asarray(pos, dtype=np.float64)  # (K, 2)
        self.vel = np.asarray(vel, dtype=np.float64)  # (K, 2)
        self.acc = np.asarray(acc, dtype=np.float64)  # (K, 2)
        num_knots = len(self.times)
        if num_knots < 1:
            raise ValueError("StateCurve: needs at least one state")
        for name in ("pos", "vel", "acc"):
            if getattr(self, name).shape != (num_knots, 2):
                raise ValueError(
                    f"StateCurve.{name}: expected ({num_knots}, 2), got {getattr(self, name).shape}"
                )
        if np.any(np.diff(self.times) <= 0):
            raise ValueError(f"StateCurve.times must be strictly increasing, got {self.times}")
        # (K-1, 2, 6): one quintic per interval and axis.
        span = np.diff(self.times)[:, None]  # (K-1, 1)
        self._coeffs = quintic_coefficients(
            self.pos[:-1],
            self.vel[:-1],
            self.acc[:-1],
            self.pos[1:],
            self.vel[1:],
            self.acc[1:],
            span,
        )
        self._init_extension(end_heading, end_curvature)

    def _init_extension(self, end_heading: float | None, end_curvature: float | None) -> None:
        vel, acc = self.vel[-1], self.acc[-1]
        speed = float(np.hypot(*vel))
        if end_heading is None:
            end_heading = math.atan2(vel[1], vel[0]) if speed > 0 else 0.0
        tangent, normal = unit(np.asarray(end_heading))
        if end_curvature is None:
            lateral = float(acc @ normal)
            end_curvature = lateral / speed**2 if speed >= MIN_SPEED_FOR_HEADING else 0.0
        self._end_speed = speed
        self._end_heading = float(end_heading)
        self._end_accel = float(acc @ tangent)
        self._end_curvature = float(end_curvature)

    def evaluate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, velocity, acceleration at times `t` (M,); each (M, 2)."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        pos = np.empty((len(t), 2))
        vel = np.empty((len(t), 2))
        acc = np.empty((len(t), 2))
        before = t < self.times[0]
        after = t > self.times[-1]
        inside = ~(before | after)
        if np.any(before):
            d = (t[before] - self.times[0])[:, None]  # (M_b, 1)
            pos[before] = self.pos[0] + self.vel[0] * d + 0.5 * self.acc[0] * d**2
            vel[before] = self.vel[0] + self.acc[0] * d
            acc[before] = self.acc[0]
        if np.any(inside):
            if len(self.times) == 1:
                pos[inside], vel[inside], acc[inside] = self.pos[0], self.vel[0], self.acc[0]
            else:
                ti = t[inside]
                idx = np.clip(
                    np.searchsorted(self.times, ti, side="right") - 1, 0, len(self.times) - 2
                )
                tau = (ti - self.times[idx])[:, None]  # (M_i, 1) broadcast over the 2 axes
                p, v, a, _ = evaluate_quintic(self._coeffs[idx], tau)  # (M_i, 2) each
                pos[inside], vel[inside], acc[inside] = p, v, a
        if np.any(after):
            pos[after], vel[after], acc[after] = self._extend(t[after] - self.times[-1])
        return pos, vel, acc

    def _extend(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Constant longitudinal acceleration and curvature after the last knot; (M, 2) each."""
        v, a, kappa = self._end_speed, self._end_accel, self._end_curvature
        stop_after = v / -a if a < 0 else math.inf
        moving = d < stop_after
        de = np.minimum(d, stop_after)
        s = v * de + 0.5 * a * de**2
        speed = np.where(moving, v + a * de, 0.0)
        accel = np.where(moving, a, 0.0)
        x, y, dtheta = arc(s, kappa)
        heading = self._end_heading + dtheta
        tangent, normal = unit(heading)
        pos = self.pos[-1] + np.stack([x, y], axis=-1) @ rotation(self._end_heading).T
        vel = speed[:, None] * tangent
        acc = accel[:, None] * tangent + (speed**2 * kappa)[:, None] * normal
        return pos, vel, acc
