"""What a tick publishes (docs/DESIGN.md §5 step 3): the newest valid plan stitched to now, or the
fallback when there is none younger than `max_plan_age_s` or the caller forces it. Both start
from the commanded state: what the previously published trajectory commands now
(`trajectory.stitch_from: published`, while the ego follows it within the stitch limits), else
the measured ego state."""

from __future__ import annotations

from dataclasses import dataclass, field

from blockplan.config import PlannerConfig, TrajectoryOutputConfig
from blockplan.runtime.frames import WindowSnapshot
from blockplan.runtime.plans import AcceptedPlan, RejectedPlan
from blockplan.trajectory import Fallback, KinematicState, Pose2D, continued_state, stitch
from blockplan.types import EgoState, Trajectory, seconds_to_ns


@dataclass(frozen=True)
class TickOutput:
    """What one tick publishes. trajectory: ego frame at `trajectory.stamp_ns` (now).
    source: the plan it was stitched from (None for a stop). new_plans: plans accepted at this
    tick (their reasoning and rollouts are published once); rejected_plans: plans finished at
    this tick that failed the gates (their reasoning is published, marked rejected)."""

    now_ns: int
    trajectory: Trajectory
    is_fallback: bool
    reason: str
    source: AcceptedPlan | None
    new_plans: tuple[AcceptedPlan, ...]
    snapshot: WindowSnapshot
    ego: EgoState | None
    is_requested: bool
    tick_ns: int = 0
    events: tuple[str, ...] = field(default_factory=tuple)
    rejected_plans: tuple[RejectedPlan, ...] = ()


@dataclass(frozen=True)
class Choice:
    trajectory: Trajectory
    is_fallback: bool
    reason: str
    source: AcceptedPlan | None


@dataclass(frozen=True)
class Published:
    """A published trajectory and the ego's odometry pose at its stamp (the next tick
    continues from it)."""

    trajectory: Trajectory
    pose: Pose2D


def commanded_state(
    now_ns: int, ego_now: EgoState, previous: Published | None, output: TrajectoryOutputConfig
) -> tuple[KinematicState, bool]:
    """The state the trajectory published at `now_ns` starts from, and whether it continues
    the previous one: with `stitch_from: published`, the velocity and acceleration the
    previously published trajectory commands now (`continued_state`), while its point for
    now is within `stitch_max_error_m` of the ego and its speed within
    `stitch_max_speed_error` of the ego's; otherwise (a first trajectory, a time jump, an ego
    that did not follow) the measured state."""
    measured = KinematicState.from_ego_state(ego_now)
    if output.stitch_from != "published" or previous is None:
        return measured, False
    if now_ns < previous.trajectory.stamp_ns:
        return measured, False
    state, error_m = continued_state(
        previous.trajectory, previous.pose, Pose2D.from_ego_state(ego_now), now_ns
    )
    if error_m > output.stitch_max_error_m:
        return measured, False
    if abs(state.v - measured.v) > output.stitch_max_speed_error:
        return measured, False
    return state, True


def choose_trajectory(
    now_ns: int,
    newest: AcceptedPlan | None,
    fallback: Fallback,
    ego_now: EgoState | None,
    config: PlannerConfig,
    forced_reason: str | None = None,
    previous: Published | None = None,
) -> Choice:
    """The trajectory to publish at `now_ns`, in the ego frame at now, from the commanded
    state (`commanded_state`; `previous`: the trajectory the last tick published). Without
    odometry the ego is taken at rest at the origin (the fallback then is a stop in place)."""
    if ego_now is None:
        commanded, now_pose = KinematicState(v=0.0), Pose2D()
    else:
        commanded, _ = commanded_state(now_ns, ego_now, previous, config.trajectory)
        now_pose = Pose2D.from_ego_state(ego_now)
    reason = forced_reason
    if reason is None:
        if newest is None:
            reason = "no valid plan yet"
        elif now_ns - newest.stamp_ns > seconds_to_ns(config.control.max_plan_age_s):
            reason = f"newest plan is {(now_ns - newest.stamp_ns) / 1e9:.3f} s old"
    out = config.trajectory
    if reason is None:
        assert newest is not None
        # A plan stamped marginally after now (camera clock ahead) is published at its stamp.
        traj = stitch(
            newest.trajectory,
            newest.pose,
            now_pose,
            max(now_ns, newest.stamp_ns),
            commanded,
            join_s=out.stitch_duration_s,
            dt=out.dt,
            horizon_s=out.horizon_s,
            speed_join_s=out.speed_join_s,
        )
        return Choice(traj, False, "", newest)
    held = fallback.last_plan
    stamp = max(now_ns, held.stamp_ns) if held is not None else now_ns
    result = fallback.trajectory(stamp, now_pose, commanded)
    source = newest if result.action == "hold_last" else None
    return Choice(
        result.trajectory, True, f"{reason}; fallback {result.action}: {result.reason}", source
    )
