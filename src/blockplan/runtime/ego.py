"""Ego history from odometry: validated, with body-frame acceleration derived.

Odometry carries pose and body-frame velocity and yaw rate ω but no acceleration. The
acceleration is the rigid-body one in the body frame, a = dv/dt + ω × v, with dv/dt the
difference of the body-frame velocity over at least `accel_window_s` and ω the reported yaw
rate of the newest sample (so turning at constant speed gives the centripetal part ω·v_x):

    a_x = (v_x₁ − v_x₀) / (t₁ − t₀) − ω₁ v_y₁,    a_y = (v_y₁ − v_y₀) / (t₁ − t₀) + ω₁ v_x₁

This is what the training labels hold (sim/labels.py: the speed change of the last 50 ms
simulator step and speed × yaw rate), so with 20 Hz odometry and the default 50 ms window the
prompt's ax, ay are the trained ones exactly.

Rejected samples (counted by the caller from the returned `OdometryResult`): non-finite values;
outliers whose implied acceleration is implausible or whose position disagrees with the
reported velocity; stamps before the newest sample (out of order) or equal to it (a
duplicate). A stamp far behind the newest one is a time jump (the caller resets everything).
An orientation that is no rotation (a zero quaternion) never gets here: the message
conversion rejects it (`blockplan.bags.OdometryError`).
"""

from __future__ import annotations

import bisect
import enum
import math
import threading

import numpy as np

from blockplan.runtime.limits import RuntimeLimits
from blockplan.types import EgoState, ns_to_seconds, seconds_to_ns

_FIELDS = ("x", "y", "yaw", "v_x", "v_y", "yaw_rate", "a_x", "a_y")


class OdometryResult(str, enum.Enum):
    ACCEPTED = "accepted"
    NONFINITE = "nonfinite"
    OUTLIER = "outlier"
    OUT_OF_ORDER = "out_of_order"
    DUPLICATE = "duplicate"  # the newest sample's stamp again (a re-sent message): dropped
    TIME_JUMP = "time_jump"
    RESTARTED = "restarted"  # accepted after too many consecutive outliers: history restarted


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _world_velocity(ego: EgoState) -> np.ndarray:
    c, s = math.cos(ego.yaw), math.sin(ego.yaw)
    return np.array([c * ego.v_x - s * ego.v_y, s * ego.v_x + c * ego.v_y])


class EgoHistory:
    """Accepted ego states, oldest→newest, with derived acceleration (thread-safe)."""

    def __init__(self, limits: RuntimeLimits | None = None, keep_s: float = 0.0) -> None:
        """keep_s: history the caller needs behind the newest sample (the planner's ego
        history span plus slack); at least `limits.ego_history_s` is kept."""
        self.limits = limits or RuntimeLimits()
        self.keep_s = max(self.limits.ego_history_s, keep_s)
        self._states: list[EgoState] = []
        self._stamps: list[int] = []
        self._num_outliers_in_row = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._states)

    @property
    def latest(self) -> EgoState | None:
        with self._lock:
            return self._states[-1] if self._states else None

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self._stamps.clear()
            self._num_outliers_in_row = 0

    def push(self, ego: EgoState) -> OdometryResult:
        """Validate `ego` (its a_x, a_y are ignored) and append it with derived acceleration."""
        if not all(math.isfinite(getattr(ego, f)) for f in _FIELDS):
            return OdometryResult.NONFINITE
        with self._lock:
            result = OdometryResult.ACCEPTED
            if self._states:
                last = self._states[-1]
                if ego.stamp_ns < last.stamp_ns - seconds_to_ns(self.limits.time_jump_s):
                    return OdometryResult.TIME_JUMP
                if ego.stamp_ns == last.stamp_ns:
                    return OdometryResult.DUPLICATE
                if ego.stamp_ns < last.stamp_ns:
                    return OdometryResult.OUT_OF_ORDER
                if self._is_outlier(last, ego):
                    self._num_outliers_in_row += 1
                    if self._num_outliers_in_row < self.limits.max_consecutive_outliers:
                        return OdometryResult.OUTLIER
                    self._states.clear()
                    self._stamps.clear()
                    result = OdometryResult.RESTARTED
            self._num_outliers_in_row = 0
            self._append(ego)
            return result

    def _is_outlier(self, last: EgoState, ego: EgoState) -> bool:
        dt = ns_to_seconds(ego.stamp_ns - last.stamp_ns)
        dv = np.linalg.norm(_world_velocity(ego) - _world_velocity(last))
        if dv / dt > self.limits.max_plausible_accel:
            return True
        mean_velocity = 0.5 * (_world_velocity(ego) + _world_velocity(last))
        predicted = np.array([last.x, last.y]) + mean_velocity * dt
        # The tolerance grows with the distance covered: a plausible acceleration over dt.
        slack = self.limits.position_tolerance_m + 0.5 * self.limits.max_plausible_accel * dt**2
        return float(np.linalg.norm(np.array([ego.x, ego.y]) - predicted)) > slack

    def _append(self, ego: EgoState) -> None:
        target = ego.stamp_ns - seconds_to_ns(self.limits.accel_window_s)
        a_x = a_y = 0.0
        if self._states:
            # The newest earlier sample at least accel_window_s back (or the oldest one).
            i = max(0, bisect.bisect_right(self._stamps, target) - 1)
            ref = self._states[i]
            dt = ns_to_seconds(ego.stamp_ns - ref.stamp_ns)
            a_x = (ego.v_x - ref.v_x) / dt - ego.yaw_rate * ego.v_y
            a_y = (ego.v_y - ref.v_y) / dt + ego.yaw_rate * ego.v_x
        state = EgoState(
            stamp_ns=ego.stamp_ns,
            x=ego.x,
            y=ego.y,
            yaw=ego.yaw,
            v_x=ego.v_x,
            v_y=ego.v_y,
            a_x=a_x,
            a_y=a_y,
            yaw_rate=ego.yaw_rate,
        )
        self._states.append(state)
        self._stamps.append(state.stamp_ns)
        cutoff = state.stamp_ns - seconds_to_ns(self.keep_s)
        drop = bisect.bisect_left(self._stamps, cutoff)
        if drop > 0 and drop < len(self._states):
            del self._states[:drop]
            del self._stamps[:drop]

    def state_at(self, stamp_ns: int) -> EgoState | None:
        """The ego state at `stamp_ns`: interpolated between samples, extrapolated along the
        newest velocity and yaw rate for at most `max_odometry_age_s` past the newest sample
        (held beyond), the oldest sample before the history. None without any sample."""
        with self._lock:
            if not self._states:
                return None
            i = bisect.bisect_left(self._stamps, stamp_ns)
            if i < len(self._stamps) and self._stamps[i] == stamp_ns:
                return self._states[i]
            if i == 0:
                return self._states[0]
            if i == len(self._states):
                return self._extrapolate(self._states[-1], stamp_ns)
            a, b = self._states[i - 1], self._states[i]
        w = (stamp_ns - a.stamp_ns) / (b.stamp_ns - a.stamp_ns)

        def lerp(name: str) -> float:
            return (1 - w) * getattr(a, name) + w * getattr(b, name)

        return EgoState(
            stamp_ns=int(stamp_ns),
            x=lerp("x"),
            y=lerp("y"),
            yaw=_wrap(a.yaw + w * _wrap(b.yaw - a.yaw)),
            v_x=lerp("v_x"),
            v_y=lerp("v_y"),
            a_x=lerp("a_x"),
            a_y=lerp("a_y"),
            yaw_rate=lerp("yaw_rate"),
        )

    def _extrapolate(self, last: EgoState, stamp_ns: int) -> EgoState:
        dt = min(ns_to_seconds(stamp_ns - last.stamp_ns), self.limits.max_odometry_age_s)
        vx, vy = _world_velocity(last)
        return EgoState(
            stamp_ns=int(stamp_ns),
            x=last.x + vx * dt,
            y=last.y + vy * dt,
            yaw=_wrap(last.yaw + last.yaw_rate * dt),
            v_x=last.v_x,
            v_y=last.v_y,
            a_x=last.a_x,
            a_y=last.a_y,
            yaw_rate=last.yaw_rate,
        )

    def history(self, t0_ns: int, num_states: int, period_ns: int) -> tuple[EgoState, ...]:
        """`num_states` states at t0 − k·period for k = num_states−1 … 0 (oldest→newest)."""
        out = []
        for k in range(num_states - 1, -1, -1):
            state = self.state_at(t0_ns - k * period_ns)
            if state is None:
                return ()
            out.append(state)
        return tuple(out)

    def age_s(self, now_ns: int) -> float | None:
        latest = self.latest
        return None if latest is None else ns_to_seconds(max(0, now_ns - latest.stamp_ns))
