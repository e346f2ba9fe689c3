import numpy as np
import pytest

from blockplan.closedloop import EpisodeResult, Trace, aggregate


def test_constant_acceleration_has_no_jerk_and_a_ramp_has_its_jerk():
    trace = Trace()
    for k in range(30):
        t = k * 0.1
        trace.add(t, 10 * t + t * t, 0.0, 10.0 + 2.0 * t)
    assert trace.mean_abs_jerk() == pytest.approx(0.0, abs=1e-9)
    ramp = Trace()
    for k in range(30):
        t = k * 0.1
        ramp.add(t, 0.0, 0.0, 10.0 + 0.5 * 3.0 * t * t)  # jerk 3 m/s^3
    assert ramp.mean_abs_jerk() == pytest.approx(3.0, rel=1e-6)


def test_progress_is_the_driven_path_length():
    trace = Trace()
    for k in range(11):
        trace.add(k * 0.1, float(k), float(k), 1.0)
    assert trace.progress_m() == pytest.approx(10 * np.sqrt(2))


def test_lane_offset_is_the_mean_and_max_of_its_magnitude():
    trace = Trace()
    assert trace.lane_offset_m() == (0.0, 0.0)
    for k, offset in enumerate([0.5, -1.5, 1.0]):
        trace.add(k * 0.1, 0.0, 0.0, 1.0, offset)
    assert trace.lane_offset_m() == pytest.approx((1.0, 1.5))


def test_aggregate_rates_and_means():
    def r(seed, collided, departed, progress):
        return EpisodeResult(
            "cv",
            "highway",
            seed,
            5.0,
            collided,
            departed,
            progress,
            0.5,
            {"plans": 10},
            mean_abs_lane_offset_m=0.1 * seed,
            max_abs_lane_offset_m=0.5 * seed,
        )

    doc = aggregate(
        [
            r(0, True, False, 10.0),
            r(1, False, True, 30.0),
            r(2, False, False, 50.0),
            r(3, False, False, 70.0),
        ]
    )
    assert doc["episodes"] == 4
    assert doc["collision_rate"] == 0.25
    assert doc["lane_departure_rate"] == 0.25
    assert doc["progress_m"] == 40.0
    assert doc["mean_abs_jerk"] == 0.5
    assert doc["counters"] == {"plans": 40}
    assert doc["mean_abs_lane_offset_m"] == pytest.approx(0.15)
    assert doc["max_abs_lane_offset_m"] == 1.5
    assert aggregate([])["episodes"] == 0
