"""Validity gates: each check catches its own violation, and a gentle trajectory passes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockplan.config import ComfortConfig, GateConfig
from blockplan.trajectory import check_gates, upsample

GATES = GateConfig()
DT = 0.1


def cruise(speed: float = 10.0):
    """A straight constant-speed trajectory sampled every 0.1 s: passes every gate."""
    return upsample(np.outer([1, 2, 3, 4, 5], [speed, 0.0]), dt=DT)


def with_value(traj, name: str, index: int, value: float):
    values = getattr(traj, name).copy()
    values[index] = value
    return dataclasses.replace(traj, **{name: values})


def found(report, check: str, index: int) -> bool:
    return any(v.check == check and v.index == index for v in report.violations)


indices = st.integers(1, 48)
excesses = st.floats(1e-3, 5.0)


def test_gentle_trajectory_passes():
    report = check_gates(cruise())
    assert report.ok and report.violations == [] and report.summary() == "ok"
    assert check_gates(upsample([[9, 0.2], [18, 0.8], [27, 1.8], [36, 3.2], [45, 5.0]])).ok


@settings(deadline=None)
@given(
    st.sampled_from(["t", "x", "y", "yaw", "speed", "accel", "curvature"]),
    indices,
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
def test_finite_gate(name, index, bad):
    report = check_gates(with_value(cruise(), name, index, bad))
    assert not report.ok and report.failed_checks == ("finite",)
    assert found(report, "finite", index) and report.nonfinite_fields == (name,)


@settings(deadline=None)
@given(indices, excesses)
def test_max_speed_gate(index, excess):
    report = check_gates(with_value(cruise(), "speed", index, GATES.max_speed + excess))
    assert report.failed_checks == ("max_speed",) and found(report, "max_speed", index)
    assert report.worst("max_speed").excess == pytest.approx(excess)


@settings(deadline=None)
@given(indices, excesses)
def test_accel_range_gates(index, excess):
    low = check_gates(with_value(cruise(), "accel", index, GATES.min_accel - excess))
    assert found(low, "min_accel", index)
    assert low.worst("min_accel").excess == pytest.approx(excess)
    high = check_gates(with_value(cruise(), "accel", index, GATES.max_accel + excess))
    assert found(high, "max_accel", index) and not found(high, "min_accel", index)


@settings(deadline=None)
@given(indices, excesses)
def test_lateral_accel_gate(index, excess):
    # At 10 m/s, κ = a_lat / v²; both signs of curvature count.
    curvature = -(GATES.max_lateral_accel + excess) / 100.0
    report = check_gates(with_value(cruise(), "curvature", index, curvature))
    assert found(report, "max_lateral_accel", index)
    assert report.worst("max_lateral_accel").value == pytest.approx(
        GATES.max_lateral_accel + excess
    )


@settings(deadline=None)
@given(indices, st.floats(1e-2, 9.0))
def test_jerk_gate(index, excess):
    # One sample's acceleration stepped by (max jerk + excess)·dt: within the accel limits.
    step = (GATES.max_abs_jerk + excess) * DT
    report = check_gates(with_value(cruise(), "accel", index, step))
    assert report.failed_checks == ("max_abs_jerk",)
    assert found(report, "max_abs_jerk", index) and found(report, "max_abs_jerk", index + 1)


@settings(deadline=None)
@given(indices, st.floats(1e-3, 0.4))
def test_yaw_rate_gate(index, excess):
    # At 4 m/s a yaw rate just above the limit keeps the lateral acceleration below its own.
    traj = cruise(speed=4.0)
    report = check_gates(with_value(traj, "curvature", index, (GATES.max_yaw_rate + excess) / 4.0))
    assert report.failed_checks == ("max_yaw_rate",) and found(report, "max_yaw_rate", index)


def test_the_hard_yaw_rate_gate_skips_a_near_standstill():
    """Below `yaw_rate_min_speed` (3 m/s hard, 0 comfort) the yaw rate is not checked."""
    traj = with_value(cruise(speed=2.0), "curvature", 10, 3.0 / 2.0)  # 3 rad/s at 2 m/s
    assert check_gates(traj, GATES).ok
    assert check_gates(traj, ComfortConfig()).failed_checks == ("max_lateral_accel", "max_yaw_rate")


@settings(deadline=None)
@given(indices)
def test_time_must_increase(index):
    traj = cruise()
    report = check_gates(with_value(traj, "t", index, float(traj.t[index - 1])))
    assert found(report, "increasing_time", index)


def test_limits_come_from_the_config_and_summary_names_the_worst():
    strict = GateConfig(max_speed=5.0)
    report = check_gates(cruise(), strict)
    assert report.failed_checks == ("max_speed",) and len(report.violations) == 50
    check, index, value, limit = report.violations[0]
    assert (check, index, value, limit) == ("max_speed", 0, pytest.approx(10.0), 5.0)
    assert "max_speed: 50x" in report.summary()
