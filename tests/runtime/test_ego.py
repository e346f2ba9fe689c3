"""Ego history: derived acceleration, rejection of bad odometry, interpolation."""

from __future__ import annotations

import math

import pytest

from blockplan.runtime import EgoHistory, OdometryResult, RuntimeLimits
from blockplan.types import EgoState

MS = 1_000_000


def _straight(t_s: float, a: float = 2.0, v0: float = 5.0) -> EgoState:
    return EgoState(
        stamp_ns=round(t_s * 1e9),
        x=v0 * t_s + 0.5 * a * t_s**2,
        y=0.0,
        yaw=0.0,
        v_x=v0 + a * t_s,
    )


def _circle(t_s: float, v: float = 10.0, r: float = 50.0) -> EgoState:
    w = v / r
    return EgoState(
        stamp_ns=round(t_s * 1e9),
        x=r * math.sin(w * t_s),
        y=r * (1 - math.cos(w * t_s)),
        yaw=w * t_s,
        v_x=v,
        yaw_rate=w,
    )


def test_longitudinal_acceleration_is_derived() -> None:
    hist = EgoHistory()
    for i in range(20):
        assert hist.push(_straight(i * 0.05)) == OdometryResult.ACCEPTED
    assert hist.latest.a_x == pytest.approx(2.0, abs=1e-6)
    assert hist.latest.a_y == pytest.approx(0.0, abs=1e-9)


def test_centripetal_acceleration_in_a_turn() -> None:
    hist = EgoHistory()
    for i in range(40):
        hist.push(_circle(i * 0.05))
    assert hist.latest.a_y == pytest.approx(10.0**2 / 50.0, rel=0.02)
    assert hist.latest.a_x == pytest.approx(0.0, abs=0.05)


def test_acceleration_is_the_last_50_ms_step_like_the_labels() -> None:
    """The training labels hold the speed change of the last 50 ms simulator step and speed ×
    yaw rate: 20 Hz odometry with a changing acceleration gives exactly those."""
    hist = EgoHistory()
    v = [5.0, 5.1, 5.3, 5.6, 6.0]  # accelerations 2, 4, 6, 8 m/s^2 over the steps
    for i, speed in enumerate(v):
        hist.push(
            EgoState(stamp_ns=i * 50 * MS, x=0.25 * i, y=0.0, yaw=0.0, v_x=speed, yaw_rate=0.1)
        )
    assert hist.latest.a_x == pytest.approx(8.0, abs=1e-9)
    assert hist.latest.a_y == pytest.approx(6.0 * 0.1, abs=1e-12)


@pytest.mark.parametrize("field", ["x", "yaw", "v_x", "yaw_rate"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_odometry_is_rejected(field: str, bad: float) -> None:
    hist = EgoHistory()
    hist.push(_straight(0.0))
    sample = _straight(0.05).__dict__ | {field: bad}
    assert hist.push(EgoState(**sample)) == OdometryResult.NONFINITE
    assert len(hist) == 1


def test_outliers_are_rejected_then_a_persistent_jump_restarts() -> None:
    hist = EgoHistory(RuntimeLimits(max_consecutive_outliers=3))
    for i in range(5):
        hist.push(_straight(i * 0.1, a=0.0))
    jumped = EgoState(stamp_ns=500 * MS, x=40.0, y=0.0, yaw=0.0, v_x=5.0)  # 37 m teleport
    assert hist.push(jumped) == OdometryResult.OUTLIER
    fast = EgoState(stamp_ns=510 * MS, x=2.55, y=0.0, yaw=0.0, v_x=50.0)  # +45 m/s in 0.1 s
    assert hist.push(fast) == OdometryResult.OUTLIER
    assert hist.push(_straight(0.5, a=0.0)) == OdometryResult.ACCEPTED  # resets the run
    for k in range(2):
        assert hist.push(EgoState(600 * MS + k * MS, 100.0, 0, 0, 5.0)) == OdometryResult.OUTLIER
    restart = EgoState(700 * MS, 100.5, 0, 0, 5.0)
    assert hist.push(restart) == OdometryResult.RESTARTED
    assert len(hist) == 1 and hist.latest.x == 100.5


def test_duplicate_out_of_order_and_time_jump() -> None:
    hist = EgoHistory()
    hist.push(_straight(5.0))
    assert hist.push(_straight(5.0)) == OdometryResult.DUPLICATE  # a re-sent message
    assert hist.push(_straight(4.95)) == OdometryResult.OUT_OF_ORDER
    assert hist.push(_straight(1.0)) == OdometryResult.TIME_JUMP


def test_interpolation_extrapolation_and_history() -> None:
    hist = EgoHistory(RuntimeLimits(max_odometry_age_s=0.2))
    for i in range(11):
        hist.push(_straight(i * 0.1, a=0.0, v0=10.0))
    mid = hist.state_at(250 * MS)
    assert mid.x == pytest.approx(2.5) and mid.stamp_ns == 250 * MS
    ahead = hist.state_at(1100 * MS)
    assert ahead.x == pytest.approx(11.0)
    capped = hist.state_at(2000 * MS)  # extrapolates at most 0.2 s
    assert capped.x == pytest.approx(12.0)
    before = hist.state_at(-MS)
    assert before.x == 0.0
    states = hist.history(1000 * MS, 3, 500 * MS)
    assert [s.stamp_ns for s in states] == [0, 500 * MS, 1000 * MS]
    assert EgoHistory().history(0, 2, MS) == ()
    assert hist.age_s(1500 * MS) == pytest.approx(0.5)


def test_yaw_interpolates_across_the_wrap() -> None:
    hist = EgoHistory()
    hist.push(EgoState(0, 0.0, 0.0, math.pi - 0.05, 0.0))
    hist.push(EgoState(100 * MS, 0.0, 0.0, -math.pi + 0.05, 0.0))
    mid = hist.state_at(50 * MS)
    assert abs(abs(mid.yaw) - math.pi) < 1e-9
