"""From a finished plan to something publishable: each rollout's jerk-minimizing fit (the
published path, `trajectory.waypoint_tolerance_m`), their average, the hard validity gates
(reject) and the comfort limits (report), and the record the control loop keeps of an
accepted plan. The WOD-E2E JMT interpolation of the same rollouts is kept for the metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blockplan.config import ComfortConfig, GateConfig, LaneGuardConfig, TrajectoryOutputConfig
from blockplan.runtime.lane_guard import guard_keeps
from blockplan.runtime.planner import plan_rollouts
from blockplan.trajectory import (
    GateReport,
    Pose2D,
    average_rollouts,
    check_gates,
    consensus_rollouts,
    smooth_upsample,
    upsample,
)
from blockplan.types import Observation, Plan, Trajectory


class InvalidPlanError(ValueError):
    """A plan that cannot be published: non-finite waypoints or failed (hard) validity gates."""


@dataclass(frozen=True)
class PlanWindow:
    """Which inputs a plan was computed from, so a live plan and a replayed one can be
    compared and reproduced (RUNTIME.md "Live and offline"): the request stamp t0 (the newest
    fresh frame), the tick that asked, each camera's frame stamps in view order (oldest→newest;
    the black frames of a degraded camera carry the stamps of the first fresh camera), the
    degraded cameras, the ego history stamps and the route command."""

    stamp_ns: int
    requested_ns: int
    frames: tuple[tuple[str, tuple[int, ...]], ...]
    ego_stamps_ns: tuple[int, ...]
    route_command: str
    is_degraded: bool = False
    degraded_cameras: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        observation: Observation,
        requested_ns: int,
        is_degraded: bool,
        degraded_cameras: tuple[str, ...] = (),
    ) -> PlanWindow:
        frames: dict[str, list[int]] = {}
        for frame in observation.frames:
            frames.setdefault(frame.camera, []).append(int(frame.stamp_ns))
        return cls(
            stamp_ns=int(observation.stamp_ns),
            requested_ns=int(requested_ns),
            frames=tuple((camera, tuple(stamps)) for camera, stamps in frames.items()),
            ego_stamps_ns=tuple(int(e.stamp_ns) for e in observation.ego_history),
            route_command=observation.route_command,
            is_degraded=bool(is_degraded),
            degraded_cameras=tuple(degraded_cameras),
        )

    def to_json(self) -> dict:
        """The JSON form published in the reasoning record (`window`)."""
        return {
            "stamp_ns": self.stamp_ns,
            "requested_ns": self.requested_ns,
            "frames": {camera: list(stamps) for camera, stamps in self.frames},
            "ego_stamps_ns": list(self.ego_stamps_ns),
            "route_command": self.route_command,
            "is_degraded": self.is_degraded,
            "degraded_cameras": list(self.degraded_cameras),
        }

    @classmethod
    def from_json(cls, doc: dict) -> PlanWindow:
        """The inverse of `to_json` (KeyError / TypeError / ValueError on a malformed one)."""
        return cls(
            stamp_ns=int(doc["stamp_ns"]),
            requested_ns=int(doc["requested_ns"]),
            frames=tuple((str(c), tuple(int(s) for s in st)) for c, st in doc["frames"].items()),
            ego_stamps_ns=tuple(int(s) for s in doc["ego_stamps_ns"]),
            route_command=str(doc["route_command"]),
            is_degraded=bool(doc.get("is_degraded", False)),
            degraded_cameras=tuple(str(c) for c in doc.get("degraded_cameras", ())),
        )


@dataclass(frozen=True)
class AcceptedPlan:
    """A plan that passed the gates. trajectory: the rollout average in the ego frame at t0
    (= plan.stamp_ns); rollouts: (N, P, 2) upsampled rollout positions; spread: (P,) RMS
    distance of the rollouts from the mean; pose: the odometry pose of the ego at t0;
    comfort: the trajectory against the comfort limits (published whatever it says);
    protocol_xy: (P, 2) the WOD-E2E interpolation of the same rollouts at trajectory.t (what
    the displacement metrics score)."""

    plan: Plan
    trajectory: Trajectory
    rollouts: np.ndarray
    spread: np.ndarray
    pose: Pose2D
    latency_ns: int
    ready_ns: int
    is_degraded: bool = False
    comfort: GateReport = field(default_factory=GateReport)
    protocol_xy: np.ndarray | None = None
    window: PlanWindow | None = None

    @property
    def stamp_ns(self) -> int:
        return self.plan.stamp_ns


@dataclass(frozen=True)
class RejectedPlan:
    """A plan the planner returned but the post-processing rejected (non-finite waypoints,
    failed gates): never published as a trajectory, but its reasoning is, with the reason."""

    plan: Plan
    reason: str
    latency_ns: int
    ready_ns: int
    window: PlanWindow | None = None

    @property
    def stamp_ns(self) -> int:
        return self.plan.stamp_ns


@dataclass(frozen=True)
class ProcessedPlan:
    trajectory: Trajectory
    rollouts: np.ndarray  # (N, P, 2)
    spread: np.ndarray  # (P,)
    comfort: GateReport = field(default_factory=GateReport)
    protocol: Trajectory | None = None  # the WOD-E2E interpolation (metrics)
    guarded: int = 0  # rollouts the lane guard dropped


def plan_trajectory(
    plan: Plan,
    output: TrajectoryOutputConfig,
    gates: GateConfig,
    max_deviation_m: float = 0.0,
    comfort: ComfortConfig | None = None,
    observation: Observation | None = None,
    lane_guard: LaneGuardConfig | None = None,
) -> ProcessedPlan:
    """The trajectory, rollouts (N, P, 2) and spread (P,) of `plan`: each rollout fitted
    (`smooth_upsample` within `output.waypoint_tolerance_m`); those the lane guard keeps
    (`lane_guard` against `observation`'s lanes beside, runtime/lane_guard.py) and that
    agree with their consensus (`consensus_rollouts`, `max_deviation_m`) averaged, then
    gated against the hard limits and checked against the comfort ones (`comfort`, default
    `ComfortConfig()`). `rollouts` holds all N; `spread` is over the averaged ones. Raises
    InvalidPlanError naming the problem (no rollout left by the guard included)."""
    waypoints = plan_rollouts(plan)  # (N, 5, 2)
    sampling = dict(dt=output.dt, horizon_s=output.horizon_s, stamp_ns=plan.stamp_ns)
    try:
        fitted = [smooth_upsample(w, output.waypoint_tolerance_m, **sampling) for w in waypoints]
        guard = lane_guard if lane_guard is not None else LaneGuardConfig(enabled=False)
        allowed, why = guard_keeps(fitted, observation, guard)
    except ValueError as e:
        raise InvalidPlanError(f"plan at {plan.stamp_ns} ns: {e}") from e
    if not allowed.any():
        raise InvalidPlanError(
            f"plan at {plan.stamp_ns} ns: the lane guard drops every rollout ({why})"
        )
    free = np.flatnonzero(allowed)
    kept = [int(free[i]) for i in consensus_rollouts(waypoints[free], max_deviation_m)]
    try:
        protocol = average_rollouts([upsample(waypoints[i], **sampling) for i in kept]).mean
    except ValueError as e:
        raise InvalidPlanError(f"plan at {plan.stamp_ns} ns: {e}") from e
    average = average_rollouts([fitted[i] for i in kept])
    trajectory = average.mean
    report = check_gates(trajectory, gates)
    if not report.ok:
        raise InvalidPlanError(f"plan at {plan.stamp_ns} ns fails the gates: {report.summary()}")
    rollouts = np.stack([t.xy for t in fitted])  # (N, P, 2)
    comfort_report = check_gates(trajectory, comfort if comfort is not None else ComfortConfig())
    guarded = int((~allowed).sum())
    return ProcessedPlan(trajectory, rollouts, average.spread, comfort_report, protocol, guarded)
