"""Writes what the control loop publishes into the output bag, as the live node would
publish it (docs/DESIGN.md §4), next to copies of the input topics. The messages per tick come
from `blockplan.messages.tick.TickMessages`, the same builder the live node publishes with."""

from __future__ import annotations

from blockplan.bags import BagRecord, BagWriter, TypestoreMessages, ego_to_tf
from blockplan.config import PlannerConfig
from blockplan.messages.tick import TickMessages
from blockplan.runtime import TickOutput
from blockplan.runtime.health import DiagnosticStatusData
from blockplan.types import EgoState

FLUSH_EVERY_TICKS = 50  # bound what a killed process can lose to ~5 s of output


class OutputPublisher:
    def __init__(self, writer: BagWriter, config: PlannerConfig) -> None:
        self.writer = writer
        self.config = config
        self.ns = TypestoreMessages(writer.typestore)
        self.messages = TickMessages(self.ns, config)
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
        for key, msg in self.messages.tick(out):  # key: a field of TopicsConfig
            self.writer.write(getattr(self.config.topics, key), msg, log_time_ns)
        self.num_ticks += 1
        if self.num_ticks % FLUSH_EVERY_TICKS == 0:
            self.writer.flush()

    def diagnostics(
        self, statuses: list[DiagnosticStatusData], stamp_ns: int, log_time_ns: int
    ) -> None:
        msg = self.messages.diagnostics(statuses, stamp_ns)
        self.writer.write(self.config.topics.diagnostics, msg, log_time_ns)
