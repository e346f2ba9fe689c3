"""What the node publishes for a tick, as messages of a message namespace (no rclpy).

The live node passes `ModuleMessages` (rclpy's generated classes); tests pass
`TypestoreMessages`. The conversions are the ones replay writes into its bags
(`blockplan.bags`), so what RViz shows live is what the replay report shows.

Per tick: the trajectory (nav_msgs/Path in `base_link`, stamped with the tick time the
trajectory is stitched to); per plan accepted at that tick: its rollouts (MarkerArray, stamped
with the plan's observation time t0) and its reasoning (String, JSON); per plan the gates
rejected: its reasoning only, with `accepted: false` and the reason. Every reasoning record
names the window the plan was computed from (`window`: request stamp, frame stamps per camera,
ego history stamps), so a live plan can be matched with the replayed one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from blockplan.bags import (
    MessageNamespace,
    RolloutMarkerPublisher,
    diagnostics_to_msg,
    plan_to_reasoning,
    string_msg,
    trajectory_to_path,
)
from blockplan.config import PlannerConfig
from blockplan.runtime import AcceptedPlan, DiagnosticStatusData, TickOutput
from blockplan.runtime.cpu import CpuSample
from blockplan.runtime.health import OK, WARN
from blockplan.runtime.plans import RejectedPlan

# diagnostic_aggregator and rqt_robot_monitor expect about 1 Hz.
DIAGNOSTICS_PERIOD_S = 1.0

# Keys of the node's publishers (fields of `TopicsConfig`).
TRAJECTORY, ROLLOUTS, REASONING, DIAGNOSTICS = "trajectory", "rollouts", "reasoning", "diagnostics"


def reasoning_record(plan: AcceptedPlan | RejectedPlan) -> dict[str, Any]:
    """The reasoning JSON of a plan plus what only the runtime knows: latency, degradation,
    whether the gates accepted it (and why not), and its window."""
    extra: dict[str, Any] = {
        "latency_ms": round(plan.latency_ns / 1e6, 3),
        "ready_ns": int(plan.ready_ns),
        "is_degraded": bool(plan.window.is_degraded if plan.window else False),
        "accepted": isinstance(plan, AcceptedPlan),
    }
    if isinstance(plan, AcceptedPlan):
        extra["is_degraded"] = bool(plan.is_degraded)
    else:
        extra["rejected"] = plan.reason
    if plan.window is not None:
        extra["window"] = plan.window.to_json()
    return plan_to_reasoning(plan.plan, extra)


class TickMessages:
    """Turns tick outputs and health into (publisher key, message) pairs."""

    def __init__(self, ns: MessageNamespace, config: PlannerConfig) -> None:
        self.ns = ns
        self.frame_id = config.frames.base_link
        self.markers = RolloutMarkerPublisher(self.frame_id)

    def tick(self, out: TickOutput) -> list[tuple[str, Any]]:
        messages: list[tuple[str, Any]] = [
            (TRAJECTORY, trajectory_to_path(self.ns, out.trajectory, self.frame_id))
        ]
        for accepted in out.new_plans:
            markers = self.markers.to_msg(self.ns, accepted.rollouts, accepted.stamp_ns)
            text = json.dumps(reasoning_record(accepted), separators=(",", ":"))
            messages += [(ROLLOUTS, markers), (REASONING, string_msg(self.ns, text))]
        for rejected in out.rejected_plans:
            text = json.dumps(reasoning_record(rejected), separators=(",", ":"))
            messages.append((REASONING, string_msg(self.ns, text)))
        return messages

    def diagnostics(self, statuses: Sequence[DiagnosticStatusData], stamp_ns: int) -> Any:
        return diagnostics_to_msg(self.ns, stamp_ns, statuses)


def model_status(
    config: PlannerConfig,
    warmup_ms: float | None,
    weights: str | None = None,
    backend: str | None = None,
) -> DiagnosticStatusData:
    """`blockplan: model`: which model and backend the node runs (docs/DESIGN.md §4) and what
    its weights are (`sha256-verified`; WARN when `unverified`: no manifest.json). `backend`:
    the one that runs (what `model.backend: auto` resolved to), default the configured one."""
    model, decoding = config.model, config.decoding
    backend = backend or model.backend
    message = f"{model.dir} on {backend} ({model.dtype})"
    level = OK
    if weights == "unverified":
        level, message = WARN, f"{message}; weights unverified (no manifest.json)"
    values: dict[str, object] = {
        "model": model.dir,
        "backend": backend,
        "dtype": model.dtype,
        "strategy": decoding.strategy,
        "num_rollouts": config.rollouts.num_rollouts,
    }
    if weights is not None:
        values["weights"] = weights
    if warmup_ms is not None:
        values["warmup_ms"] = round(warmup_ms, 3)
    return DiagnosticStatusData("blockplan: model", level, message, values=values)


def node_status(cpu: CpuSample) -> DiagnosticStatusData:
    """`blockplan: node`: the node's CPU time over the last diagnostics period, in percent of
    one core: all of it, the inference thread's, and the rest (what the node costs besides
    inference, also per control tick)."""
    return DiagnosticStatusData(
        "blockplan: node",
        OK,
        f"CPU {cpu.process_percent:.1f} %: inference {cpu.inference_percent:.1f} %, "
        f"besides inference {cpu.other_percent:.1f} %",
        values=cpu.values(),
    )
