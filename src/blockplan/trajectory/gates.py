"""Limit checks on a trajectory (docs/ALGORITHMS.md §9). The same checks serve two sets of limits:

* `GateConfig` (`gates.*`): hard feasibility limits. A plan beyond them is rejected and the
  fallback published (the validity gates).
* `ComfortConfig` (`comfort.*`): comfort limits. A plan beyond them is published all the
  same; the excess is counted and reported (/diagnostics, metrics).

Checks, each reported per offending sample as (check, index, value, limit):

* `finite`            every field finite (value: the bad value; limit: nan; the report's
                      `nonfinite_fields` names the fields). If any sample is not finite the
                      other checks are skipped — their numbers would lie.
* `increasing_time`   sample times strictly increasing (value: the time step; limit: 0).
* `max_speed`         speed <= max_speed.
* `min_accel`         longitudinal acceleration >= min_accel.
* `max_accel`         longitudinal acceleration <= max_accel.
* `max_lateral_accel` |speed² · curvature| <= max_lateral_accel.
* `max_abs_jerk`      |Δaccel / Δt| between neighbouring samples <= max_abs_jerk (longitudinal
                      jerk; reported at the later sample of the pair).
* `max_yaw_rate`      |speed · curvature| <= max_yaw_rate (the instantaneous yaw rate of the
                      path; differencing `yaw` would flag the harmless step where a held
                      low-speed heading is released), at samples with speed >=
                      `yaw_rate_min_speed` (the hard gates skip near-standstill samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from blockplan.config import ComfortConfig, GateConfig
from blockplan.types import Trajectory

_FIELDS = ("t", "x", "y", "yaw", "speed", "accel", "curvature")


class GateViolation(NamedTuple):
    """One failed check at one sample. `excess` is by how much the limit is passed."""

    check: str
    index: int
    value: float
    limit: float

    @property
    def excess(self) -> float:
        if self.check in ("min_accel", "increasing_time"):
            return self.limit - self.value
        return self.value - self.limit


@dataclass(frozen=True)
class GateReport:
    """ok: no check failed. violations: every (check, index, value, limit), in check order."""

    violations: list[GateViolation] = field(default_factory=list)
    nonfinite_fields: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def failed_checks(self) -> tuple[str, ...]:
        """Names of the failed checks, each once, in check order."""
        return tuple(dict.fromkeys(v.check for v in self.violations))

    def worst(self, check: str) -> GateViolation | None:
        """The violation of `check` with the largest excess (None if it passed)."""
        found = [v for v in self.violations if v.check == check]
        return max(found, key=lambda v: v.excess) if found else None

    def summary(self) -> str:
        if self.ok:
            return "ok"
        parts = []
        for check in self.failed_checks:
            w = self.worst(check)
            assert w is not None
            count = sum(v.check == check for v in self.violations)
            parts.append(
                f"{check}: {count}x, worst {w.value:.3g} at [{w.index}] (limit {w.limit:.3g})"
            )
        return "; ".join(parts)


def _exceeding(
    check: str, values: np.ndarray, limit: float, above: bool, offset: int = 0
) -> list[GateViolation]:
    """Samples where `values` pass `limit` (above it, or below it when `above` is False)."""
    bad = values > limit if above else values < limit
    return [
        GateViolation(check, int(i) + offset, float(values[i]), float(limit))
        for i in np.flatnonzero(bad)
    ]


def check_gates(traj: Trajectory, gates: GateConfig | ComfortConfig | None = None) -> GateReport:
    """Run every check on `traj` against `gates` (default: the hard limits, `GateConfig()`;
    pass a `ComfortConfig` for the comfort report)."""
    gates = gates if gates is not None else GateConfig()
    violations: list[GateViolation] = []
    nonfinite_fields = []
    for name in _FIELDS:
        values = np.asarray(getattr(traj, name), dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            nonfinite_fields.append(name)
        violations += [GateViolation("finite", int(i), float(values[i]), math.nan) for i in bad]
    if violations:
        violations.sort(key=lambda v: v.index)
        return GateReport(violations, tuple(nonfinite_fields))

    t = np.asarray(traj.t, dtype=np.float64)
    speed = np.asarray(traj.speed, dtype=np.float64)
    accel = np.asarray(traj.accel, dtype=np.float64)
    curvature = np.asarray(traj.curvature, dtype=np.float64)
    step = np.diff(t)
    violations += [
        GateViolation("increasing_time", int(i) + 1, float(step[i]), 0.0)
        for i in np.flatnonzero(step <= 0)
    ]
    violations += _exceeding("max_speed", speed, gates.max_speed, above=True)
    violations += _exceeding("min_accel", accel, gates.min_accel, above=False)
    violations += _exceeding("max_accel", accel, gates.max_accel, above=True)
    violations += _exceeding(
        "max_lateral_accel", np.abs(speed**2 * curvature), gates.max_lateral_accel, above=True
    )
    if np.all(step > 0):
        jerk = np.abs(np.diff(accel) / step)
        violations += _exceeding("max_abs_jerk", jerk, gates.max_abs_jerk, above=True, offset=1)
    yaw_rate = np.where(speed >= gates.yaw_rate_min_speed, np.abs(speed * curvature), 0.0)
    violations += _exceeding("max_yaw_rate", yaw_rate, gates.max_yaw_rate, above=True)
    return GateReport(violations)
