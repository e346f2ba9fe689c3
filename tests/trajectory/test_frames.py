"""Pose2D algebra and KinematicState conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from blockplan.trajectory import KinematicState, Pose2D
from blockplan.types import EgoState

poses = st.builds(
    Pose2D,
    x=st.floats(-1e3, 1e3),
    y=st.floats(-1e3, 1e3),
    yaw=st.floats(-10.0, 10.0),
)
points = arrays(np.float64, (4, 2), elements=st.floats(-1e3, 1e3))


def assert_same_pose(a: Pose2D, b: Pose2D) -> None:
    assert (a.x, a.y) == pytest.approx((b.x, b.y), abs=1e-8)
    assert math.remainder(a.yaw - b.yaw, 2 * math.pi) == pytest.approx(0.0, abs=1e-9)


@settings(deadline=None)
@given(poses)
def test_compose_with_inverse_is_identity(pose):
    assert_same_pose(pose.compose(pose.inverse()), Pose2D())
    assert_same_pose(pose.inverse().compose(pose), Pose2D())


@settings(deadline=None)
@given(poses, poses, points)
def test_compose_transforms_like_nested_transforms(a, b, pts):
    np.testing.assert_allclose(
        a.compose(b).transform_points(pts), a.transform_points(b.transform_points(pts)), atol=1e-8
    )
    np.testing.assert_allclose(
        a.inverse().transform_points(a.transform_points(pts)), pts, atol=1e-8
    )


def test_transform_points_by_hand():
    pose = Pose2D(1.0, 2.0, math.pi / 2)  # child x axis points along parent +y
    np.testing.assert_allclose(pose.transform_points([[1.0, 0.0], [0.0, 1.0]]), [[1, 3], [0, 2]])
    np.testing.assert_allclose(pose.rotate_vectors([1.0, 0.0]), [0.0, 1.0], atol=1e-15)
    with pytest.raises(ValueError, match=r"\(\.\.\., 2\)"):
        pose.transform_points(np.zeros((3, 3)))


def test_pose_rejects_non_finite():
    with pytest.raises(ValueError, match="Pose2D.yaw"):
        Pose2D(0.0, 0.0, math.nan)


def test_kinematic_state_vectors():
    state = KinematicState(v=10.0, a=1.0, curvature=0.02)
    np.testing.assert_allclose(state.velocity, [10.0, 0.0])
    np.testing.assert_allclose(state.acceleration, [1.0, 2.0])  # centripetal v² κ = 2
    assert (state.speed, state.accel) == (10.0, 1.0)
    slip = KinematicState(v=5.0, vx=4.0, vy=3.0, ax=0.5, ay=-0.5)
    np.testing.assert_allclose(slip.velocity, [4.0, 3.0])
    np.testing.assert_allclose(slip.acceleration, [0.5, -0.5])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"v": -1.0}, "KinematicState.v"),
        ({"v": 1.0, "a": math.inf}, "KinematicState.a"),
        ({"v": 1.0, "vx": 1.0}, "give both"),
        ({"v": 1.0, "ax": 1.0, "ay": math.nan}, "KinematicState.ay"),
    ],
)
def test_kinematic_state_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KinematicState(**kwargs)


def test_kinematic_state_from_ego_state():
    ego = EgoState(stamp_ns=0, x=1.0, y=2.0, yaw=0.3, v_x=10.0, a_x=-1.0, a_y=1.0, yaw_rate=0.2)
    state = KinematicState.from_ego_state(ego)
    assert (state.v, state.a, state.curvature) == pytest.approx((10.0, -1.0, 0.02))
    np.testing.assert_allclose(state.acceleration, [-1.0, 1.0])
    assert Pose2D.from_ego_state(ego) == Pose2D(1.0, 2.0, 0.3)
    still = KinematicState.from_ego_state(EgoState(0, 0.0, 0.0, 0.0, v_x=0.1, yaw_rate=0.5))
    assert still.curvature == 0.0  # not observable below MIN_SPEED_FOR_HEADING
