"""The route ahead: where a router's path is 5-60 m along it from the ego, in the ego frame."""

import math

import numpy as np
import pytest

from blockplan.trajectory import Pose2D
from blockplan.trajectory.route import MAX_ROUTE_DISTANCE_M, ROUTE_AHEAD_M, route_ahead

AHEAD = np.asarray(ROUTE_AHEAD_M)


def _line(x0: float, x1: float, step: float = 2.0, y: float = 0.0) -> np.ndarray:
    xs = np.arange(x0, x1 + 1e-9, step)
    return np.stack([xs, np.full_like(xs, y)], axis=-1)


def test_a_straight_route_through_the_ego_reads_the_distances_ahead():
    got = route_ahead(_line(-10.0, 120.0), Pose2D(0.0, 0.0, 0.0))
    np.testing.assert_allclose(got, np.stack([AHEAD, np.zeros_like(AHEAD)], -1), atol=1e-9)


def test_points_are_in_the_ego_frame_and_start_from_the_egos_projection():
    """A route running north at odom x = 101.8 and an ego at (103.3, 7) heading north: the
    route is 1.5 m to the ego's left (REP-103: +y), each point `d` ahead of the ego's own
    station on it."""
    xs = np.arange(-20.0, 150.0, 3.0)
    path = np.stack([np.full_like(xs, 101.8), xs], axis=-1)  # northwards in odom
    got = route_ahead(path, Pose2D(103.3, 7.0, math.pi / 2))
    np.testing.assert_allclose(got[:, 0], AHEAD, atol=1e-9)
    np.testing.assert_allclose(got[:, 1], np.full_like(AHEAD, 1.5), atol=1e-9)


def test_a_curve_is_read_along_its_arc():
    """A 25 m radius left turn (a roundabout's ring): the point d along it is at angle d / r."""
    r = 25.0
    angles = np.linspace(-0.5, 4.0, 400)
    path = np.stack([r * np.sin(angles), r - r * np.cos(angles)], axis=-1)
    got = route_ahead(path, Pose2D(0.0, 0.0, 0.0))
    want = np.stack([r * np.sin(AHEAD / r), r - r * np.cos(AHEAD / r)], axis=-1)
    np.testing.assert_allclose(got, want, atol=0.05)  # the polyline's chords


def test_beyond_its_end_the_route_goes_on_straight():
    got = route_ahead(_line(0.0, 20.0, step=5.0), Pose2D(0.0, 0.0, 0.0))
    np.testing.assert_allclose(got[:, 0], AHEAD, atol=1e-9)  # 30, 45, 60 m: extrapolated
    np.testing.assert_allclose(got[:, 1], 0.0, atol=1e-9)


def test_a_path_the_ego_is_not_on_or_that_cannot_say_where_it_goes_is_not_read():
    pose = Pose2D(0.0, 0.0, 0.0)
    far = _line(0.0, 100.0, y=MAX_ROUTE_DISTANCE_M + 0.5)
    assert route_ahead(far, pose) is None
    assert route_ahead(_line(0.0, 100.0, y=MAX_ROUTE_DISTANCE_M - 0.5), pose) is not None
    assert route_ahead(np.zeros((1, 2)), pose) is None
    assert route_ahead(np.zeros((5, 2)), pose) is None  # one point repeated
    bad = _line(0.0, 100.0)
    bad[3, 1] = np.nan
    assert route_ahead(bad, pose) is None
    assert route_ahead(np.zeros((4, 3)), pose) is None


@pytest.mark.parametrize("yaw", [0.0, 0.7, -2.9])
def test_the_route_ahead_does_not_depend_on_where_odom_is(yaw):
    """The same road and ego moved and turned together in odom: the same points."""
    angles = np.linspace(0.0, 2.0, 120)
    path = np.stack([30 * np.sin(angles), 30 - 30 * np.cos(angles)], axis=-1)
    ego = Pose2D(2.0, 0.05, 0.1)
    moved = Pose2D(-40.0, 12.0, yaw)
    want = route_ahead(path, ego)
    got = route_ahead(moved.transform_points(path), moved.compose(ego))
    np.testing.assert_allclose(got, want, atol=1e-9)
