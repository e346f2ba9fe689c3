"""The state a published trajectory starts from: the previous one's at now, or odometry."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.config import TrajectoryOutputConfig
from blockplan.runtime.output import Published, commanded_state
from blockplan.trajectory import KinematicState, Pose2D, stitch, upsample
from blockplan.types import EgoState, seconds_to_ns

T0 = seconds_to_ns(100.0)
OUTPUT = TrajectoryOutputConfig(stitch_from="published")


def _published() -> Published:
    """Joining a 20 m/s cruise from 18 m/s over 1 s: at now = T0 + 0.5 s it commands 20.9 m/s
    and 3 m/s², 9.7 m ahead."""
    plan = upsample(np.outer([1, 2, 3, 4, 5], [20.0, 0.0]), stamp_ns=T0)
    trajectory = stitch(plan, Pose2D(), Pose2D(), T0, KinematicState(18.0), join_s=1.0)
    return Published(trajectory, Pose2D())


def _ego(x: float, speed: float, y: float = 0.0) -> EgoState:
    return EgoState(T0 + seconds_to_ns(0.5), x, y, 0.0, speed)


def test_the_previous_trajectory_is_continued_while_the_ego_follows_it():
    now = _ego(9.6, 20.5).stamp_ns
    state, continued = commanded_state(now, _ego(9.6, 20.5), _published(), OUTPUT)
    assert continued
    assert state.a > 0.5  # the join's acceleration, not the measured 0
    assert state.v == pytest.approx(20.875)  # the JMT overshoots to catch up the position


@pytest.mark.parametrize(
    ("ego", "output"),
    [
        (_ego(9.6, 20.5), dataclasses.replace(OUTPUT, stitch_from="odometry")),
        (_ego(9.6, 19.0, y=1.5), OUTPUT),  # off the path by more than stitch_max_error_m
        (_ego(9.6, 19.5), OUTPUT),  # slower than commanded by more than stitch_max_speed_error
    ],
)
def test_otherwise_the_measured_state(ego, output):
    state, continued = commanded_state(ego.stamp_ns, ego, _published(), output)
    assert not continued
    assert state == KinematicState.from_ego_state(ego)


def test_without_a_previous_trajectory_or_before_its_stamp_the_measured_state():
    ego = _ego(9.6, 20.5)
    assert commanded_state(ego.stamp_ns, ego, None, OUTPUT)[1] is False
    early = dataclasses.replace(ego, stamp_ns=T0 - 1)
    assert commanded_state(early.stamp_ns, early, _published(), OUTPUT)[1] is False
