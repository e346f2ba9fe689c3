"""Writes what the control loop publishes into the output bag, as the live node would
publish it (DESIGN.md §4), next to copies of the input topics."""

from __future__ import annotations

import json
from typing import Any

from blockplan.bags import (
    BagRecord,
    BagWriter,
    RolloutMarkerPublisher,
    TypestoreMessages,
    diagnostics_to_msg,
    ego_to_tf,
    plan_to_reasoning,
    string_msg,
    trajectory_to_path,
)
from blockplan.config import PlannerConfig
from blockplan.runtime import AcceptedPlan, TickOutput
from blockplan.runtime.health import DiagnosticStatusData
from blockplan.types import EgoState

FLUSH_EVERY_TICKS = 50  # bound what a killed process can lose to ~5 s of output


def reasoning_record(accepted: AcceptedPlan) -> dict[str, Any]:
    """The reasoning JSON of a plan plus what only the runtime knows (latency, degradation)."""
    return plan_to_reasoning(
        accepted.plan,
        {
            "latency_ms": round(accepted.latency_ns / 1e6, 3),
            "ready_ns": int(accepted.ready_ns),
            "is_degraded": bool(accepted.is_degraded),
        },
    )


class OutputPublisher:
    def __init__(self, writer: BagWriter, config: PlannerConfig) -> None:
        self.writer = writer
        self.config = config
        self.ns = TypestoreMessages(writer.typestore)
        self.markers = RolloutMarkerPublisher(config.frames.base_link)
        self.num_ticks = 0

    def copy_input(self, record: BagRecord) -> None:
        self.writer.write_raw(record.topic, record.msgtype, record.rawdata, record.log_time_ns)

    def tf_from_odometry(self, ego: EgoState, log_time_ns: int) -> None:
        """odom → base_link for bags that carry odometry but no /tf."""
        frames = self.config.frames
        self.writer.write(
            "/tf", ego_to_tf(self.ns, ego, frames.odom, frames.base_link), log_time_ns
        )

    def tick(self, out: TickOutput, log_time_ns: int) -> None:
        topics, base = self.config.topics, self.config.frames.base_link
        self.writer.write(
            topics.trajectory, trajectory_to_path(self.ns, out.trajectory, base), log_time_ns
        )
        for accepted in out.new_plans:
            self.writer.write(
                topics.rollouts,
                self.markers.to_msg(self.ns, accepted.rollouts, accepted.stamp_ns),
                log_time_ns,
            )
            text = json.dumps(reasoning_record(accepted), separators=(",", ":"))
            self.writer.write(topics.reasoning, string_msg(self.ns, text), log_time_ns)
        self.num_ticks += 1
        if self.num_ticks % FLUSH_EVERY_TICKS == 0:
            self.writer.flush()

    def diagnostics(
        self, statuses: list[DiagnosticStatusData], stamp_ns: int, log_time_ns: int
    ) -> None:
        msg = diagnostics_to_msg(self.ns, stamp_ns, statuses)
        self.writer.write(self.config.topics.diagnostics, msg, log_time_ns)
