import math

import numpy as np
import pytest

from blockplan.closedloop import ControllerConfig, TrackingController
from blockplan.trajectory import Pose2D
from blockplan.types import Trajectory, seconds_to_ns

STAMP = seconds_to_ns(10.0)


def _traj(xy, speed, accel=0.0, dt=0.25):
    xy = np.asarray(xy, dtype=float)
    n = len(xy)
    return Trajectory(
        stamp_ns=STAMP,
        t=np.arange(n) * dt,
        x=xy[:, 0],
        y=xy[:, 1],
        yaw=np.zeros(n),
        speed=np.full(n, float(speed)),
        accel=np.full(n, float(accel)),
        curvature=np.zeros(n),
    )


def _straight(v=20.0, y=0.0):
    t = np.arange(21) * 0.25
    return _traj(np.stack([v * t, np.full_like(t, y)], axis=1), v)


def test_on_a_straight_plan_at_its_speed_the_command_is_neutral():
    ctl = TrackingController()
    cmd = ctl.command(_straight(20.0), Pose2D(), Pose2D(), 20.0, STAMP, 0.1)
    assert cmd.steering == pytest.approx(0.0, abs=1e-9)
    assert cmd.acceleration == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(cmd.action, [0.0, 0.0], atol=1e-6)


def test_slower_than_planned_accelerates_faster_brakes():
    assert (
        TrackingController()
        .command(_straight(20.0), Pose2D(), Pose2D(), 15.0, STAMP, 0.1)
        .acceleration
        > 1.0
    )
    assert (
        TrackingController()
        .command(_straight(20.0), Pose2D(), Pose2D(), 25.0, STAMP, 0.1)
        .acceleration
        < -1.0
    )


def test_a_plan_to_the_left_steers_left_and_highway_env_sign_is_flipped():
    cmd = TrackingController().command(_straight(20.0, y=2.0), Pose2D(), Pose2D(), 20.0, STAMP, 0.1)
    assert cmd.steering > 0.0  # REP-103: left
    assert cmd.action[1] < 0.0  # highway-env: positive steers towards its +y (right)
    right = TrackingController().command(
        _straight(20.0, y=-2.0), Pose2D(), Pose2D(), 20.0, STAMP, 0.1
    )
    assert right.steering == pytest.approx(-cmd.steering)


def test_the_plan_is_expressed_in_the_current_ego_frame():
    # The plan was made 1 s ago at the origin; the ego is now 20 m along it, on it.
    ctl = TrackingController()
    now = STAMP + seconds_to_ns(1.0)
    cmd = ctl.command(_straight(20.0), Pose2D(), Pose2D(20.0, 0.0, 0.0), 20.0, now, 0.1)
    assert cmd.steering == pytest.approx(0.0, abs=1e-9)
    # Same plan, but the ego drifted 1 m right of it: steer back left.
    cmd = ctl.command(_straight(20.0), Pose2D(), Pose2D(20.0, -1.0, 0.0), 20.0, now, 0.1)
    assert cmd.steering > 0.0


def test_steering_follows_a_constant_curvature_arc():
    # Arc of radius 50 m to the left; pure pursuit's curvature is 1/50 for a point on it.
    radius, v = 50.0, 10.0
    t = np.arange(21) * 0.25
    phi = v * t / radius
    xy = np.stack([radius * np.sin(phi), radius * (1 - np.cos(phi))], axis=1)
    cfg = ControllerConfig()
    cmd = TrackingController(cfg).command(_traj(xy, v), Pose2D(), Pose2D(), v, STAMP, 0.1)
    sin_beta = cfg.wheelbase_m / (2 * radius)
    expected = math.atan(2 * math.tan(math.asin(sin_beta)))
    assert cmd.steering == pytest.approx(expected, rel=0.05)


def test_a_stop_in_place_holds_the_wheel_and_brakes():
    xy = np.zeros((21, 2))
    traj = _traj(xy, 0.0)
    cmd = TrackingController().command(traj, Pose2D(), Pose2D(), 5.0, STAMP, 0.1)
    assert cmd.steering == 0.0
    assert cmd.acceleration < 0.0
    assert -1.0 <= cmd.action[0] < 0.0
