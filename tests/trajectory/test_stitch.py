"""Stitching: identity at t0, frame consistency, C2 join, extension past the plan's end."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from blockplan.trajectory import (
    MIN_SPEED_FOR_HEADING,
    KinematicState,
    Pose2D,
    state_at,
    stitch,
    stop_trajectory,
    upsample,
)
from blockplan.types import seconds_to_ns

waypoint_arrays = arrays(np.float64, (5, 2), elements=st.floats(-60.0, 60.0, allow_nan=False))
start_states = st.builds(
    KinematicState, v=st.floats(0.0, 30.0), a=st.floats(-4.0, 3.0), curvature=st.floats(-0.2, 0.2)
)
poses = st.builds(
    Pose2D, x=st.floats(-500.0, 500.0), y=st.floats(-500.0, 500.0), yaw=st.floats(-4.0, 4.0)
)
T0 = seconds_to_ns(100.0)


def assert_same_trajectory(a, b, atol):
    assert a.stamp_ns == b.stamp_ns
    for name in ("t", "x", "y", "speed", "accel", "curvature"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=atol, err_msg=name)
    yaw_error = np.remainder(a.yaw - b.yaw + math.pi, 2 * math.pi) - math.pi
    np.testing.assert_allclose(yaw_error, 0.0, atol=atol, err_msg="yaw")


@settings(deadline=None)
@given(
    waypoint_arrays,
    start_states,
    poses,
    st.sampled_from([0.0, 0.25, 0.4, 0.5, 0.75, 1.0]),
)
def test_stitching_at_t0_with_the_matching_state_is_the_identity(waypoints, start, pose, join_s):
    plan = upsample(waypoints, start=start, stamp_ns=T0)
    # The join reads the plan's state from speed/heading, exact where the heading is meaningful.
    assume(join_s == 0.0 or np.all(plan.speed[:4] >= MIN_SPEED_FOR_HEADING))
    # Exactly at the threshold, round-off decides whether a heading is held.
    assume(np.all(np.abs(plan.speed - MIN_SPEED_FOR_HEADING) > 1e-6))
    out = stitch(plan, pose, pose, T0, start, join_s=join_s, dt=0.25, horizon_s=5.0)
    scale = 1.0 + np.abs(waypoints).max()
    assert_same_trajectory(out, plan, atol=1e-7 * scale**2)


@settings(deadline=None)
@given(waypoint_arrays, poses, st.integers(1, 8), st.sampled_from([0.0, 0.5]))
def test_stitched_plan_is_the_same_path_in_odometry(waypoints, plan_pose, k, join_s):
    # The ego drove along the plan for k samples; after the join the stitched plan is the
    # original plan, seen from the new pose.
    plan = upsample(waypoints, stamp_ns=T0)
    now = k * 0.25
    ego_in_plan = Pose2D(float(plan.x[k - 1]), float(plan.y[k - 1]), float(plan.yaw[k - 1]))
    now_pose = plan_pose.compose(ego_in_plan)
    commanded = KinematicState(v=float(plan.speed[k - 1]), a=float(plan.accel[k - 1]))
    out = stitch(plan, plan_pose, now_pose, T0 + seconds_to_ns(now), commanded, join_s)
    assert out.stamp_ns == T0 + seconds_to_ns(now)
    after_join = out.t >= join_s
    in_plan = out.t + now <= 5.0 + 1e-9
    keep = after_join & in_plan
    indices = np.round((out.t[keep] + now) / 0.25).astype(int) - 1
    scale = 1.0 + np.abs(waypoints).max()
    np.testing.assert_allclose(
        now_pose.transform_points(out.xy[keep]),
        plan_pose.transform_points(plan.xy[indices]),
        atol=1e-8 * scale,
    )
    np.testing.assert_allclose(out.speed[keep], plan.speed[indices], atol=1e-8 * scale)


@settings(deadline=None)
@given(waypoint_arrays, start_states, st.sampled_from([0.2, 0.5, 0.731, 1.0]))
def test_join_leaves_the_commanded_state_and_meets_the_plan(waypoints, commanded, join_s):
    plan = upsample(waypoints, stamp_ns=T0)
    dt = 1e-3
    now_ns = T0 + seconds_to_ns(0.3)
    joined = stitch(plan, Pose2D(), Pose2D(), now_ns, commanded, join_s, dt, 2.0)
    free = stitch(plan, Pose2D(), Pose2D(), now_ns, commanded, 0.0, dt, 2.0)
    scale = 1.0 + np.abs(waypoints).max() + commanded.v
    # At s = dt the join has barely left the commanded state (position ≈ v dt, speed ≈ v).
    assert np.hypot(joined.x[0], joined.y[0]) == pytest.approx(commanded.v * dt, abs=1e-3 * scale)
    assert joined.speed[0] == pytest.approx(commanded.v, abs=0.1 * scale)
    # From s = join_s on it is the plan itself, and it arrives there without a jump.
    after = joined.t >= join_s - 1e-12
    np.testing.assert_allclose(joined.xy[after], free.xy[after], atol=1e-9 * scale)
    np.testing.assert_allclose(joined.speed[after], free.speed[after], atol=1e-9 * scale)
    j = int(np.argmax(after))
    assert np.hypot(*(joined.xy[j - 1] - free.xy[j - 1])) < 1e-3 * scale
    step = np.hypot(np.diff(joined.x), np.diff(joined.y))  # ≈ speed · dt: no velocity jump
    assert abs(step[j - 1] - step[j]) < 1e-3 * scale


def test_extension_past_the_plan_continues_at_constant_velocity():
    plan = upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), stamp_ns=T0)
    now_pose = Pose2D(15.0, 0.0, 0.0)  # 1.5 s later, on the plan
    out = stitch(plan, Pose2D(), now_pose, T0 + seconds_to_ns(1.5), KinematicState(10.0), 0.5)
    np.testing.assert_allclose(out.x, 10.0 * out.t, atol=1e-9)
    np.testing.assert_allclose(out.speed, 10.0, atol=1e-9)


def test_extension_of_a_braking_plan_comes_to_rest():
    # A plan that is still braking at its end: the extension stops and stays still.
    plan = stop_trajectory(KinematicState(8.0), 2.0, horizon_s=5.0, stamp_ns=T0)
    assert plan.speed[-1] > 0 and plan.accel[-1] < 0
    now_pose = Pose2D(float(plan.x[7]), float(plan.y[7]), 0.0)  # 2 s later
    commanded = KinematicState(float(plan.speed[7]), float(plan.accel[7]))
    out = stitch(plan, Pose2D(), now_pose, T0 + seconds_to_ns(2.0), commanded, 0.5)
    assert np.all(out.speed >= 0) and out.speed[-1] == 0.0
    assert np.all(np.diff(out.x) >= -1e-12)
    assert out.accel[-1] == 0.0


def test_bad_arguments_are_rejected():
    plan = upsample(np.outer([1, 2, 3, 4, 5], [10.0, 0.0]), stamp_ns=T0)
    state = KinematicState(10.0)
    with pytest.raises(ValueError, match="before the plan"):
        stitch(plan, Pose2D(), Pose2D(), T0 - 1, state, 0.5)
    with pytest.raises(ValueError, match="join_s"):
        stitch(plan, Pose2D(), Pose2D(), T0, state, 5.0)


@settings(deadline=None)
@given(waypoint_arrays, st.floats(0.25, 5.0))
def test_state_at_reads_the_plan_between_its_samples(waypoints, t_s):
    # The 4 Hz plan's curve is the protocol's quintic: compare with a 1 ms upsampling.
    plan = upsample(waypoints)
    fine = upsample(waypoints, dt=1e-3)
    k = int(round(t_s * 1000)) - 1
    t_s = float(fine.t[k])
    assume(fine.speed[k] >= 2 * MIN_SPEED_FOR_HEADING)
    assume(np.all(plan.speed >= MIN_SPEED_FOR_HEADING))
    state = state_at(plan, t_s)
    scale = 1.0 + np.abs(waypoints).max()
    assert state.v == pytest.approx(fine.speed[k], abs=1e-7 * scale)
    assert state.a == pytest.approx(fine.accel[k], abs=1e-6 * scale)
    assert state.curvature == pytest.approx(fine.curvature[k], abs=1e-6 * scale)
