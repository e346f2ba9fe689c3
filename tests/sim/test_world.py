from __future__ import annotations

import math

import numpy as np
import pytest

from blockplan.sim.world import hw_to_rep_xy, hw_to_rep_yaw, wrap_angle


def test_highway_env_right_is_rep103_negative_y() -> None:
    # highway-env: +y is the driver's right at heading 0; REP-103: +y is left.
    assert np.allclose(hw_to_rep_xy(np.array([10.0, 4.0])), [10.0, -4.0])
    # a heading turning towards +y_hw (to the right) is a negative (clockwise) REP-103 yaw
    assert hw_to_rep_yaw(0.3) == pytest.approx(-0.3)


def test_wrap_angle() -> None:
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert np.allclose(wrap_angle(np.array([0.0, 2 * math.pi + 0.1])), [0.0, 0.1])


def test_recorded_highway_lanes_are_to_the_right_of_lane_zero(highway_log) -> None:
    # lane 0 is the leftmost highway lane, so every other lane has y <= 0 in REP-103
    assert highway_log.crashed_at is None
    lane_ids = {lane[2] for lane in highway_log.ego_lane}
    for i, lane in enumerate(highway_log.ego_lane):
        lateral_left = highway_log.ego[i, 5]
        assert lateral_left == pytest.approx(highway_log.ego[i, 1], abs=1e-6)
        assert lateral_left < 2.1 - 0  # never left of lane 0's left edge
        assert -lane[2] * 4.0 - 2.1 < lateral_left < -lane[2] * 4.0 + 2.1
    assert lane_ids
