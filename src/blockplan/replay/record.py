"""What a replay remembers for its metrics and report: one record per tick and per plan."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blockplan.runtime import AcceptedPlan, TickOutput
from blockplan.trajectory import Pose2D
from blockplan.types import CameraFrame


@dataclass(frozen=True)
class PlanRecord:
    """A plan in the ego frame at its stamp t0: the published mean trajectory (P, 2),
    rollouts (N, P, 2), the recorded future (P, 2) when the bag covers it, its reasoning
    record, and `protocol_xy` (P, 2): the WOD-E2E interpolation of the same rollouts, what
    the displacement metrics score (the published path when None)."""

    stamp_ns: int
    t: np.ndarray
    xy: np.ndarray
    rollouts: np.ndarray
    pose: Pose2D
    latency_ms: float
    is_degraded: bool
    reasoning: dict
    truth: np.ndarray | None
    unscored: str = ""  # why there is no truth (the recording ends, a time jump, ...)
    protocol_xy: np.ndarray | None = None


@dataclass(frozen=True)
class TickRecord:
    """One tick: the published trajectory (ego frame at now) and the plan it came from."""

    now_ns: int
    is_fallback: bool
    reason: str
    xy: np.ndarray
    pose: Pose2D | None
    source_stamp_ns: int | None
    tick_ms: float
    newest_frames: tuple[CameraFrame, ...]


@dataclass
class ReplayLog:
    ticks: list[TickRecord] = field(default_factory=list)
    plans: list[PlanRecord] = field(default_factory=list)

    def add_tick(self, out: TickOutput) -> None:
        newest = tuple(fs[-1] for fs in out.snapshot.frames if fs is not None)
        pose = Pose2D.from_ego_state(out.ego) if out.ego is not None else None
        self.ticks.append(
            TickRecord(
                now_ns=out.now_ns,
                is_fallback=out.is_fallback,
                reason=out.reason,
                xy=out.trajectory.xy,
                pose=pose,
                source_stamp_ns=None if out.source is None else out.source.stamp_ns,
                tick_ms=out.tick_ns / 1e6,
                newest_frames=newest,
            )
        )

    def add_plan(
        self,
        accepted: AcceptedPlan,
        reasoning: dict,
        truth: np.ndarray | None,
        unscored: str = "",
    ) -> None:
        self.plans.append(
            PlanRecord(
                stamp_ns=accepted.stamp_ns,
                t=np.asarray(accepted.trajectory.t),
                xy=accepted.trajectory.xy,
                rollouts=np.asarray(accepted.rollouts),
                pose=accepted.pose,
                latency_ms=accepted.latency_ns / 1e6,
                is_degraded=accepted.is_degraded,
                reasoning=reasoning,
                truth=truth,
                unscored=unscored,
                protocol_xy=accepted.protocol_xy,
            )
        )
