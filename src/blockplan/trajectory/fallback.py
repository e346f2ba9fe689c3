"""What to publish when there is no fresh valid plan (`FallbackConfig`).

* policy `stop`: always a comfortable stop from the commanded state (`stop_trajectory`).
* policy `hold_last`: the last valid plan, stitched to now (`stitch`), while its age
  (now − its stamp) is at most `max_hold_age_s`; without one, or when it is older, a stop.

`Fallback` holds the last valid plan (with the odometry pose of its frame); the control loop
calls `remember` for every plan that passed the gates and `trajectory` when it needs one.
"""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config import ComfortConfig, FallbackConfig, GateConfig, TrajectoryOutputConfig
from blockplan.trajectory.frames import KinematicState, Pose2D
from blockplan.trajectory.stitch import stitch
from blockplan.trajectory.stop import stop_trajectory
from blockplan.types import Trajectory, ns_to_seconds

HOLD_LAST = "hold_last"
STOP = "stop"


@dataclass(frozen=True)
class FallbackResult:
    """trajectory: what to publish. action: `hold_last` or `stop`. held_age_s: the held
    plan's age (None for a stop). reason: why this action, for diagnostics."""

    trajectory: Trajectory
    action: str
    reason: str
    held_age_s: float | None = None


class Fallback:
    """The fallback policy with the last valid plan it may hold."""

    def __init__(
        self,
        config: FallbackConfig,
        output: TrajectoryOutputConfig,
        gates: GateConfig | ComfortConfig | None = None,
    ) -> None:
        """gates: the limits whose jerk the stop keeps to where it can (the runtime passes
        the comfort limits)."""
        self.config = config
        self.output = output
        # The stop respects that jerk limit where it can (see `stop_trajectory`).
        self._max_jerk = gates.max_abs_jerk if gates is not None else None
        self._last_plan: Trajectory | None = None
        self._last_pose: Pose2D | None = None

    @property
    def last_plan(self) -> Trajectory | None:
        return self._last_plan

    def remember(self, plan: Trajectory, plan_pose: Pose2D) -> None:
        """Keep `plan` (ego frame at its stamp, whose odometry pose is `plan_pose`)."""
        if self._last_plan is not None and plan.stamp_ns < self._last_plan.stamp_ns:
            raise ValueError(
                f"Fallback.remember: plan stamp_ns={plan.stamp_ns} is older than the held "
                f"plan's {self._last_plan.stamp_ns}"
            )
        self._last_plan, self._last_pose = plan, plan_pose

    def reset(self) -> None:
        """Forget the held plan (e.g. after a time jump)."""
        self._last_plan, self._last_pose = None, None

    def stop(self, now_ns: int, commanded: KinematicState, reason: str) -> FallbackResult:
        traj = stop_trajectory(
            commanded,
            self.config.stop_deceleration,
            dt=self.output.dt,
            horizon_s=self.output.horizon_s,
            stamp_ns=now_ns,
            max_jerk=self._max_jerk,
        )
        return FallbackResult(traj, STOP, reason)

    def trajectory(
        self, now_ns: int, now_pose: Pose2D, commanded: KinematicState
    ) -> FallbackResult:
        """The fallback trajectory at `now_ns` (ego frame at now, stamped now)."""
        if self.config.policy == STOP:
            return self.stop(now_ns, commanded, "policy is stop")
        if self._last_plan is None or self._last_pose is None:
            return self.stop(now_ns, commanded, "no valid plan to hold")
        age = ns_to_seconds(now_ns - self._last_plan.stamp_ns)
        if age < 0:
            raise ValueError(
                f"Fallback.trajectory: now_ns={now_ns} is before the held plan's "
                f"stamp_ns={self._last_plan.stamp_ns}"
            )
        if age > self.config.max_hold_age_s:
            return self.stop(
                now_ns,
                commanded,
                f"held plan is {age:.3f} s old (> max_hold_age_s={self.config.max_hold_age_s})",
            )
        traj = stitch(
            self._last_plan,
            self._last_pose,
            now_pose,
            now_ns,
            commanded,
            join_s=self.output.stitch_duration_s,
            dt=self.output.dt,
            horizon_s=self.output.horizon_s,
            speed_join_s=self.output.speed_join_s,
        )
        return FallbackResult(traj, HOLD_LAST, f"holding a {age:.3f} s old plan", held_age_s=age)
