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
    continued_state,
    curve_from_trajectory,
    speed_join,
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


@settings(deadline=None)
@given(
    waypoint_arrays,
    start_states,
    poses,
    st.floats(-3.0, 3.0),
    st.floats(-3.0, 3.0),
    st.floats(-0.5, 0.5),
    st.sampled_from([0.1, 0.5, 1.0]),
)
def test_continued_state_is_the_published_trajectory_at_now_in_the_now_frame(
    waypoints, start, pose, dx, dy, dyaw, elapsed
):
    plan = upsample(waypoints, start=start, stamp_ns=T0)
    published = stitch(plan, pose, pose, T0, start, join_s=0.5)
    # The ego is somewhere near the trajectory's point for now.
    now_ns = T0 + seconds_to_ns(elapsed)
    curve_pos, curve_vel, curve_acc = curve_from_trajectory(published).evaluate(np.array([elapsed]))
    ego = Pose2D(float(curve_pos[0, 0] + dx), float(curve_pos[0, 1] + dy), dyaw)
    now_pose = pose.compose(ego)
    state, error_m = continued_state(published, pose, now_pose, now_ns)
    assert error_m == pytest.approx(math.hypot(dx, dy), abs=1e-9 * (1 + abs(dx) + abs(dy)))
    # The same velocity and acceleration vectors, seen from the ego's frame.
    scale = 1.0 + np.abs(waypoints).max() + start.v
    np.testing.assert_allclose(
        state.velocity, Pose2D(0, 0, -dyaw).rotate_vectors(curve_vel[0]), atol=1e-9 * scale
    )
    np.testing.assert_allclose(
        state.acceleration, Pose2D(0, 0, -dyaw).rotate_vectors(curve_acc[0]), atol=1e-9 * scale
    )
    assert state.v == pytest.approx(float(np.hypot(*curve_vel[0])), abs=1e-9 * scale)


def test_continuing_the_published_trajectory_makes_consecutive_ones_c2_continuous():
    # Two different plans half a second apart: the second published trajectory leaves with
    # the velocity and acceleration the first one commands at its stamp (no step in the
    # commanded acceleration), wherever the ego measured itself to be.
    first = upsample(np.outer([1, 2, 3, 4, 5], [20.0, 0.0]), stamp_ns=T0)  # cruise 20 m/s
    published = stitch(first, Pose2D(), Pose2D(), T0, KinematicState(18.0, a=1.0), join_s=1.0)
    now_ns, ego = T0 + seconds_to_ns(0.5), Pose2D(9.5, 0.1, 0.01)  # a little off the path
    commanded, error_m = continued_state(published, Pose2D(), ego, now_ns)
    assert 0.0 < error_m < 0.5
    assert commanded.v > 18.0 and commanded.a != 0.0  # still joining the cruise
    second = upsample(np.outer([1, 2, 3, 4, 5], [16.0, 0.0]), stamp_ns=now_ns)  # slower
    dt = 1e-3
    out = stitch(second, ego, ego, now_ns, commanded, 1.0, dt=dt, horizon_s=2.0)
    # The join's jerk is finite (a few hundred m/s³ for this 4 m/s step down in 1 s), so
    # 1 ms in, speed and acceleration are still the commanded ones.
    assert out.speed[0] == pytest.approx(commanded.v + commanded.a * dt, abs=1e-3)
    assert out.accel[0] == pytest.approx(commanded.a, abs=0.5)
    np.testing.assert_allclose(
        np.arctan2(out.y[0], out.x[0]),
        np.arctan2(commanded.vy, commanded.vx),
        atol=1e-2,
    )


@settings(deadline=None)
@given(st.floats(-5.0, 5.0), st.floats(-3.0, 3.0), st.floats(0.5, 4.0))
def test_speed_join_meets_its_boundary_values_and_integrates(e0, de0, T):
    tau = np.linspace(0.0, T + 1.0, 4001)
    big_e, e, de = speed_join(e0, de0, T, tau)
    assert e[0] == pytest.approx(e0, abs=1e-12) and de[0] == pytest.approx(de0, abs=1e-12)
    after = tau >= T
    np.testing.assert_allclose(e[after], 0.0, atol=1e-12)
    np.testing.assert_allclose(de[after], 0.0, atol=1e-12)
    np.testing.assert_allclose(np.gradient(big_e, tau), e, atol=1e-3 * (1 + abs(e0) + abs(de0)))
    np.testing.assert_allclose(np.gradient(e, tau), de, atol=1e-2 * (1 + abs(e0) + abs(de0)))
    # Its jerk e'' is linear over [0, T]: bounded by its end values.
    bound = 6 * abs(e0) / T**2 + 4 * abs(de0) / T
    assert np.abs(np.diff(de) / np.diff(tau)).max() <= bound * (1 + 1e-2) + 1e-9


@settings(deadline=None)
@given(waypoint_arrays, st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([0.5, 1.5, 3.0]))
def test_a_speed_join_from_the_plans_own_state_is_the_plan(waypoints, elapsed, speed_join_s):
    plan = upsample(waypoints, stamp_ns=T0)
    # Moving all along (below MIN_SPEED_FOR_HEADING the direction is held, by convention).
    _, vel, _ = curve_from_trajectory(plan).evaluate(np.arange(0.0, 5.0 + elapsed, 0.005))
    assume(np.hypot(vel[:, 0], vel[:, 1]).min() >= 2 * MIN_SPEED_FOR_HEADING)
    own = state_at(plan, elapsed)
    now_ns = T0 + seconds_to_ns(elapsed)
    retimed = stitch(plan, Pose2D(), Pose2D(), now_ns, own, 0.0, speed_join_s=speed_join_s)
    plain = stitch(plan, Pose2D(), Pose2D(), now_ns, own, 0.0)
    scale = 1.0 + np.abs(waypoints).max()
    np.testing.assert_allclose(retimed.xy, plain.xy, atol=1e-6 * scale)
    np.testing.assert_allclose(retimed.speed, plain.speed, atol=1e-6 * scale)
    np.testing.assert_allclose(retimed.accel, plain.accel, atol=1e-5 * scale)


@pytest.mark.parametrize("v0", [14.0, 18.0, 20.4])
def test_a_speed_join_reaches_the_plans_speed_without_overshoot_and_stays_on_its_path(v0):
    # A 20 m/s plan that drifts half a lane left; the ego is at another speed. The position
    # join would overshoot the plan's speed to make up the distance; the speed join goes
    # monotonically from the commanded speed to the plan's, within its jerk bound, and the
    # path is the plan's.
    waypoints = np.outer([1, 2, 3, 4, 5], [20.0, 0.0]) + np.array(
        [[0, 0.1], [0, 0.5], [0, 1.2], [0, 1.8], [0, 2.0]]
    )
    plan = upsample(waypoints, stamp_ns=T0)
    commanded = KinematicState(v0, a=0.0)
    T, dt = 2.0, 0.01
    out = stitch(plan, Pose2D(), Pose2D(), T0, commanded, 0.0, dt, 5.0, speed_join_s=T)
    plain = stitch(plan, Pose2D(), Pose2D(), T0, commanded, 0.0, dt, 5.0)
    joining = out.t <= T
    lo, hi = sorted([v0, 20.0])
    assert np.all((out.speed[joining] >= lo - 0.2) & (out.speed[joining] <= hi + 0.2))
    assert np.all(np.diff(out.speed[joining]) * np.sign(20.0 - v0) >= -1e-3)
    # After the join: the plan's own speed at the same time.
    after = out.t >= T + 0.1
    np.testing.assert_allclose(out.speed[after], plain.speed[after], atol=0.05)
    # On the plan's path: every point is within a few cm of the plan's polyline.
    fine = stitch(plan, Pose2D(), Pose2D(), T0, commanded, 0.0, 0.005, 5.0)
    gap = np.linalg.norm(out.xy[:, None] - fine.xy[None], axis=-1).min(axis=1)
    assert gap[out.t <= 4.0].max() < 0.05
    # Its jerk: the plan's (a cruise: ~0) plus the correction's, 6 |Δv| / T² at most.
    jerk = np.abs(np.diff(out.accel[joining]) / dt)
    assert jerk.max() <= 6 * abs(v0 - 20.0) / T**2 + 1.0
    # The position join over the same time overshoots.
    position = stitch(plan, Pose2D(), Pose2D(), T0, commanded, T, dt, 5.0)
    over = 0.25 * (hi - lo)
    assert position.speed[joining].max() > hi + over or position.speed[joining].min() < lo - over


@pytest.mark.parametrize(
    "commanded",
    [KinematicState(22.0), KinematicState(20.0, a=0.0)],
    ids=["slower", "braking"],
)
def test_a_plan_that_asks_for_less_is_followed_at_once_not_eased_into(commanded):
    # Slower than the ego by more than the margin, or braking harder: the speed join keeps
    # out (the plan's timing, the position join), so a plan that answers a car ahead brakes
    # from the first tick.
    waypoints = np.outer([1, 2, 3, 4, 5], [20.0, 0.0])
    start = KinematicState(20.0, a=-3.0) if commanded.v == 20.0 else None
    if start is not None:  # decelerating at 3 m/s² from 20 m/s
        waypoints = np.array([[20.0 * t - 1.5 * t * t, 0.0] for t in range(1, 6)])
    plan = upsample(waypoints, start=start, stamp_ns=T0)
    joined = stitch(plan, Pose2D(), Pose2D(), T0, commanded, 0.5, 0.1, 5.0, speed_join_s=1.5)
    plain = stitch(plan, Pose2D(), Pose2D(), T0, commanded, 0.5, 0.1, 5.0)
    assert_same_trajectory(joined, plain, atol=1e-12)
    # while a plan within the jitter margin is retimed
    near = KinematicState(plan.speed[0] + 0.3, a=float(plan.accel[0]))
    retimed = stitch(plan, Pose2D(), Pose2D(), T0, near, 0.5, 0.1, 5.0, speed_join_s=1.5)
    assert not np.allclose(retimed.x, stitch(plan, Pose2D(), Pose2D(), T0, near, 0.5, 0.1, 5.0).x)


def test_a_speed_join_of_a_stop_comes_to_rest_and_stays():
    plan = stop_trajectory(KinematicState(8.0), 3.0, horizon_s=5.0, stamp_ns=T0)
    out = stitch(plan, Pose2D(), Pose2D(), T0, KinematicState(8.3), 0.0, speed_join_s=1.5)
    assert np.all(out.speed >= 0) and out.speed[-1] == pytest.approx(0.0, abs=1e-9)
    assert np.all(np.diff(out.x) >= -1e-9)
