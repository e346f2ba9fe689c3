"""What a tick publishes (docs/DESIGN.md §5 step 3): the newest valid plan stitched to now, or the
fallback when there is none younger than `max_plan_age_s` or the caller forces it."""

from __future__ import annotations

from dataclasses import dataclass, field

from blockplan.config import PlannerConfig
from blockplan.runtime.frames import WindowSnapshot
from blockplan.runtime.plans import AcceptedPlan, RejectedPlan
from blockplan.trajectory import Fallback, KinematicState, Pose2D, stitch
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


def choose_trajectory(
    now_ns: int,
    newest: AcceptedPlan | None,
    fallback: Fallback,
    ego_now: EgoState | None,
    config: PlannerConfig,
    forced_reason: str | None = None,
) -> Choice:
    """The trajectory to publish at `now_ns`, in the ego frame at now. Without odometry the
    ego is taken at rest at the origin (the fallback then is a stop in place)."""
    if ego_now is None:
        commanded, now_pose = KinematicState(v=0.0), Pose2D()
    else:
        commanded = KinematicState.from_ego_state(ego_now)
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
        )
        return Choice(traj, False, "", newest)
    held = fallback.last_plan
    stamp = max(now_ns, held.stamp_ns) if held is not None else now_ns
    result = fallback.trajectory(stamp, now_pose, commanded)
    source = newest if result.action == "hold_last" else None
    return Choice(
        result.trajectory, True, f"{reason}; fallback {result.action}: {result.reason}", source
    )
