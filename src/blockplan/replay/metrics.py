"""metrics.json of a replay: the runtime's counters and latencies, and open-loop displacement
errors of every plan against the recorded future path (WOD-E2E ADE@3s/5s of the plan's JMT
interpolation; L2 at 1/2/3 s in the UniAD convention, the error of the point at t;
`published_ade_3s/5s` of the path sent to control, the jerk-minimizing fit; and where the
ADE@5s comes from: `along_track_5s` / `cross_track_5s`, the mean error along and across the
recorded path, and `along_track_bias_5s`, the signed along-track error at 5 s)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from blockplan.replay.record import ReplayLog
from blockplan.trajectory import metrics as traj_metrics

PROTOCOL_TIMES_S = 0.25 * np.arange(1, 21)  # the 4 Hz, 5 s grid of the WOD-E2E protocol


def on_protocol_grid(t: np.ndarray, xy: np.ndarray) -> np.ndarray | None:
    """(20, 2) positions at t = 0.25 … 5 s, interpolated from a plan sampled at `t`."""
    if len(t) < 2 or t[0] > PROTOCOL_TIMES_S[0] + 1e-9 or t[-1] < PROTOCOL_TIMES_S[-1] - 1e-9:
        return None
    return np.stack(
        [np.interp(PROTOCOL_TIMES_S, t, xy[:, 0]), np.interp(PROTOCOL_TIMES_S, t, xy[:, 1])],
        axis=-1,
    )


def displacement_metrics(log: ReplayLog) -> dict[str, Any]:
    """ADE / L2 over the plans with a recorded future (`evaluated_plans`); the others are
    counted by reason in `unscored_plans` (the recording ends within their horizon, it jumps
    back, ...), so a low count is explained."""
    rows = []
    unscored: Counter[str] = Counter()
    for plan in log.plans:
        xy = plan.xy if plan.protocol_xy is None else plan.protocol_xy
        pred = on_protocol_grid(plan.t, xy)
        if plan.truth is None:
            unscored[plan.unscored or "no recorded future"] += 1
            continue
        gt = on_protocol_grid(plan.t, plan.truth)
        published = on_protocol_grid(plan.t, plan.xy)
        if pred is None or gt is None or published is None:
            unscored["the plan does not cover the 0.25 … 5 s protocol grid"] += 1
            continue
        rows.append(
            [
                traj_metrics.ade_3s(pred, gt),
                traj_metrics.ade_5s(pred, gt),
                traj_metrics.l2_at_uniad(pred, gt, 1.0),
                traj_metrics.l2_at_uniad(pred, gt, 2.0),
                traj_metrics.l2_at_uniad(pred, gt, 3.0),
                traj_metrics.ade_3s(published, gt),
                traj_metrics.ade_5s(published, gt),
                *_along_cross_5s(pred, gt),
            ]
        )
    if not rows:
        return {"evaluated_plans": 0, "unscored_plans": dict(unscored)}
    mean = np.mean(np.array(rows), axis=0)
    names = (
        "ade_3s",
        "ade_5s",
        "l2_1s",
        "l2_2s",
        "l2_3s",
        "published_ade_3s",
        "published_ade_5s",
        "along_track_5s",
        "cross_track_5s",
        "along_track_bias_5s",
    )
    return {
        **{name: round(float(v), 4) for name, v in zip(names, mean, strict=True)},
        "evaluated_plans": len(rows),
        "unscored_plans": dict(unscored),
        "displacement_unit": "m",
        "l2_protocol": "uniad (L2 of the point at t)",
    }


def _along_cross_5s(pred: np.ndarray, gt: np.ndarray) -> tuple[float, float, float]:
    """Where a plan's ADE@5s comes from: the mean |along-track| and |cross-track| error over
    the 5 s points (a speed error vs a path error), and the signed along-track error at 5 s
    (> 0: the plan runs ahead of the recorded path, < 0: it lags behind)."""
    along, across = traj_metrics.along_cross(pred, gt)
    n = traj_metrics.NUM_POINTS_5S
    return float(np.abs(along[:n]).mean()), float(np.abs(across[:n]).mean()), float(along[n - 1])


def streaming_metrics(
    runtime_metrics: dict[str, Any], planner_stats: dict[str, Any] | None
) -> dict[str, Any]:
    """The `streaming` section: how much the requested windows shared (the runtime's count,
    whatever the planner), their spacing error, the planner's streaming counters (streamed
    ticks, full prefills by reason, frames reused / computed, images encoded) and the encode +
    prefill time of every plan (rejected ones too)."""
    shared = runtime_metrics.get("window_frames_shared", 0)
    new = runtime_metrics.get("window_frames_new", 0)
    return {
        "window_frames_shared": shared,
        "window_frames_new": new,
        "window_shared_fraction": round(shared / (shared + new), 4) if shared + new else None,
        "frame_spacing_error_ms": runtime_metrics.get("frame_spacing_error_ms"),
        "planner": planner_stats,
        "encode_prefill_ms": runtime_metrics.get("encode_prefill_ms"),
    }


def replay_metrics(runtime_metrics: dict[str, Any], log: ReplayLog, **info: Any) -> dict[str, Any]:
    """The metrics.json document. Required keys first: ticks, plans, fallbacks,
    deadline_misses, latency_ms {p50, p99}, invalid_inputs; then the displacement errors when
    the bag has a recorded future; then every other counter."""
    latency = runtime_metrics["latency_ms"]
    doc: dict[str, Any] = {
        "ticks": runtime_metrics["ticks"],
        "plans": runtime_metrics["plans"],
        "fallbacks": runtime_metrics["fallbacks"],
        "deadline_misses": runtime_metrics["deadline_misses"],
        "latency_ms": {"p50": latency["p50"], "p99": latency["p99"]},
        "invalid_inputs": runtime_metrics["invalid_inputs"],
    }
    doc.update(displacement_metrics(log))
    doc["tick_ms"] = runtime_metrics["tick_ms"]
    doc["plan_age_ms"] = runtime_metrics["plan_age_ms"]
    doc["counters"] = {
        k: v for k, v in runtime_metrics.items() if isinstance(v, int) and k not in doc
    }
    doc.update(info)
    return doc
