"""PNG summary plots of a replay (matplotlib, headless)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from blockplan.replay.metrics import on_protocol_grid
from blockplan.replay.record import ReplayLog


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def latency_plot(log: ReplayLog) -> bytes:
    """Inference latency per plan and tick handling time over the replay."""
    fig, ax = plt.subplots(figsize=(7, 2.8))
    t0 = log.ticks[0].now_ns if log.ticks else 0
    if log.plans:
        ax.plot(
            [(p.stamp_ns - t0) / 1e9 for p in log.plans],
            [p.latency_ms for p in log.plans],
            ".-",
            label="inference latency (ms)",
        )
    ax.plot(
        [(t.now_ns - t0) / 1e9 for t in log.ticks],
        [t.tick_ms for t in log.ticks],
        lw=0.8,
        label="tick handling (ms)",
    )
    fallbacks = [(t.now_ns - t0) / 1e9 for t in log.ticks if t.is_fallback]
    if fallbacks:
        ax.plot(fallbacks, np.zeros(len(fallbacks)), "r|", ms=12, label="fallback tick")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def displacement_plot(log: ReplayLog) -> bytes | None:
    """L2 error against the recorded future over the horizon, mean and spread over plans."""
    errors = []
    for p in log.plans:
        pred = on_protocol_grid(p.t, p.xy)
        truth = None if p.truth is None else on_protocol_grid(p.t, p.truth)
        if pred is not None and truth is not None:
            errors.append(np.linalg.norm(pred - truth, axis=-1))
    if not errors:
        return None
    e = np.array(errors)  # (num_plans, 20)
    t = 0.25 * np.arange(1, 21)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.plot(t, e.mean(axis=0), label=f"mean over {len(e)} plans")
    ax.fill_between(
        t, np.percentile(e, 10, axis=0), np.percentile(e, 90, axis=0), alpha=0.3, label="10-90 %"
    )
    ax.set_xlabel("horizon (s)")
    ax.set_ylabel("L2 error (m)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def summary_plots(log: ReplayLog) -> list[tuple[str, bytes]]:
    plots = [("latency.png", latency_plot(log))]
    displacement = displacement_plot(log)
    if displacement is not None:
        plots.append(("displacement.png", displacement))
    return plots
