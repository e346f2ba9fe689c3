"""Soak: the runtime for a stated virtual time on a bag played in a loop (`blockplan soak`).

The control loop is the one `blockplan replay` drives (the vehicle's `PlannerRuntime`, or
the robot's `RobotRuntime` as `replay --embodiment robot` drives it), with ideal timing on a
virtual clock, so it runs as fast as the CPU allows. Each pass over the bag is restamped
forward (header stamps and log times, as `blockplan play --restamp` rewrites them) so that
it starts one sensor period after the previous pass ended: the clock never goes back and no
pass is a time jump. The pose does jump back to the bag's start at every pass (the recording
starts over), which the runtime sees as odometry outliers: the fallbacks in the first seconds
of a pass are counted apart as loop-boundary fallbacks.

Per minute of virtual time `SoakRecorder` keeps one row: the process's RSS, the Python heap
objects after a collection, plan latency (inference: planner + post-processing) p50 / p99,
the plan's CPU time (the planning thread's, p50 / p99: what a plan costs whatever else
shares the machine, where wall latency also counts the wait for a core), tick handling p99, ticks, published ticks, fallbacks (at a loop boundary / elsewhere), and
the largest depth of each queue the runtime holds, sampled once per second. metrics.json is
rewritten after every minute (a killed run still leaves its minutes readable); the targets
checked are in `targets()`.
"""

from __future__ import annotations

import gc
import html
import io
import json
import logging
import math
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.bags import BagRecord, open_bag_reader
from blockplan.bags.restamp import Restamper, cdr_header_stamp_ns
from blockplan.config import PlannerConfig
from blockplan.messages.tick import TickMessages
from blockplan.planner.loading import backend_of, weights_of
from blockplan.replay.driver import _Replayer
from blockplan.replay.report import write_atomic
from blockplan.replay.topics import ReplayInputError, resolve_topics
from blockplan.replay.truth import RecordedPath
from blockplan.runtime import (
    PlannerRuntime,
    RuntimeLimits,
    TickOutput,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.runtime.health import DiagnosticStatusData

log = logging.getLogger(__name__)

MINUTE_NS = 60 * 10**9
# Targets (docs/BENCHMARKS.md "Soak").
MAX_RSS_GROWTH_PCT = 5.0
MAX_P99_CHANGE_PCT = 10.0


def rss_mb() -> float:
    """The process's resident set size now (MiB): VmRSS, else the peak from getrusage."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def heap_objects() -> int:
    """Objects the garbage collector tracks, after a full collection."""
    gc.collect()
    return len(gc.get_objects())


def _ms_stats(samples_ns: np.ndarray) -> dict[str, float | None]:
    if samples_ns.size == 0:
        return {"p50": None, "p99": None, "max": None}
    ms = samples_ns.astype(np.float64) / 1e6
    return {
        "p50": round(float(np.percentile(ms, 50)), 3),
        "p99": round(float(np.percentile(ms, 99)), 3),
        "max": round(float(ms.max()), 3),
    }


def default_windows(minutes: float) -> tuple[int, int]:
    """(warm-up minutes for the RSS target, window minutes for the latency target): 5 and
    10 for an hour, scaled down for shorter runs (at least one minute each)."""
    whole = max(1, int(minutes))
    return min(5, max(1, whole // 10)), min(10, max(1, whole // 2))


@dataclass
class _Minute:
    """What one virtual minute collects until its row is written."""

    inference: list[int]
    tick: list[int]
    inference_cpu: list[int]
    ticks: int = 0
    published: int = 0
    fallbacks: int = 0
    boundary_fallbacks: int = 0
    plans: int = 0
    wall_start: float = 0.0
    cpu_start: float = 0.0

    @classmethod
    def start(cls) -> _Minute:
        return cls([], [], [], wall_start=time.perf_counter(), cpu_start=time.process_time())


class SoakRecorder:
    """Per-minute rows, the summary and the targets of a soak; metrics.json after each
    minute (`write`). The driver calls `loop_started` at each pass, `on_latency` from the
    runtime's health, `on_tick` after each tick; `done` once `minutes` of virtual time ran."""

    def __init__(
        self,
        out_dir: Path,
        minutes: float,
        period_ns: int,
        boundary_s: float,
        queues: Callable[[], dict[str, int]],
        meta: dict[str, Any],
        warmup_minutes: int | None = None,
        window_minutes: int | None = None,
        on_minute: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not (math.isfinite(minutes) and minutes > 0):
            raise ValueError(f"minutes={minutes}: must be > 0")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.minutes = float(minutes)
        self.end_ns = round(self.minutes * MINUTE_NS)
        self.period_ns = int(period_ns)
        self.boundary_ns = round(boundary_s * 1e9)
        self.queues = queues
        self.meta = dict(meta)
        warmup, window = default_windows(minutes)
        self.warmup_minutes = warmup if warmup_minutes is None else int(warmup_minutes)
        self.window_minutes = window if window_minutes is None else int(window_minutes)
        self.on_minute = on_minute
        self.rows: list[dict[str, Any]] = []
        # per minute: inference (wall), tick, inference CPU time
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.t0: int | None = None
        self.last_now: int | None = None
        self.loop = -1
        self.last_loop = -1  # the pass of the last tick counted
        self.loop_start_ns: int | None = None
        self.loop_starts_ns: list[int] = []
        self.clock_backwards = 0
        self.tick_gaps = 0
        self.done = False
        self.interrupted = False
        self.wall_start = time.perf_counter()
        self.rss_start_mb = rss_mb()
        self.runtime_counters: dict[str, Any] = {}
        self._minute = _Minute.start()
        self._queue_max: dict[str, int] = {}

    # ---------------------------------------------------------------- fed by the driver

    def loop_started(self, loop: int, first_stamp_ns: int) -> None:
        self.loop, self.loop_start_ns = loop, int(first_stamp_ns)
        self.loop_starts_ns.append(int(first_stamp_ns))

    def on_latency(self, which: str, latency_ns: int) -> None:
        if which == "inference":
            self._minute.inference.append(int(latency_ns))
        elif which == "tick":
            self._minute.tick.append(int(latency_ns))
        elif which == "inference_cpu":
            self._minute.inference_cpu.append(int(latency_ns))

    def on_tick(self, now_ns: int, published: bool, is_fallback: bool, new_plans: int) -> None:
        if self.done:
            return
        if self.t0 is None:
            self.t0 = now_ns
        if self.last_now is not None:
            if now_ns <= self.last_now:
                self.clock_backwards += 1
            elif now_ns - self.last_now != self.period_ns:
                self.tick_gaps += 1
        self.last_now = now_ns
        elapsed = now_ns - self.t0
        while elapsed >= (len(self.rows) + 1) * MINUTE_NS and not self.done:
            self._close_minute()
            self.done = len(self.rows) * MINUTE_NS >= self.end_ns
        if elapsed >= self.end_ns:  # a fractional last minute
            if self._minute.ticks:
                self._close_minute()
            self.done = True
        if self.done:
            return
        m = self._minute
        self.last_loop = self.loop
        m.ticks += 1
        m.published += bool(published)
        m.plans += new_plans
        if is_fallback:
            at_boundary = (
                self.loop_start_ns is not None and now_ns - self.loop_start_ns < self.boundary_ns
            )
            m.fallbacks += 1
            m.boundary_fallbacks += at_boundary
        per_second = max(1, round(1e9 / self.period_ns))
        if m.ticks % per_second == 1 or per_second == 1:
            for name, depth in self.queues().items():
                self._queue_max[name] = max(self._queue_max.get(name, 0), int(depth))

    # ---------------------------------------------------------------- rows and outputs

    def _close_minute(self) -> None:
        m, self._minute = self._minute, _Minute.start()
        inference = np.asarray(m.inference, dtype=np.int64)
        tick = np.asarray(m.tick, dtype=np.int64)
        inference_cpu = np.asarray(m.inference_cpu, dtype=np.int64)
        self.samples.append((inference, tick, inference_cpu))
        lat, tick_ms = _ms_stats(inference), _ms_stats(tick)
        cpu_s = time.process_time() - m.cpu_start
        row = {
            "minute": len(self.rows) + 1,
            "loop": self.loop,
            "ticks": m.ticks,
            "published": m.published,
            "plans": m.plans,
            "inferences": int(inference.size),
            "fallbacks": m.fallbacks,
            "boundary_fallbacks": m.boundary_fallbacks,
            "other_fallbacks": m.fallbacks - m.boundary_fallbacks,
            "plan_latency_ms": lat,
            "plan_cpu_ms": _ms_stats(inference_cpu),
            "tick_ms": tick_ms,
            "rss_mb": round(rss_mb(), 2),
            "heap_objects": heap_objects(),
            "queues": dict(sorted(self._queue_max.items())),
            "wall_s": round(time.perf_counter() - m.wall_start, 2),
            # the process's CPU time: what the plans cost whatever else shares the machine
            "cpu_s": round(cpu_s, 2),
            "cpu_ms_per_plan": round(1000.0 * cpu_s / inference.size, 2)
            if inference.size
            else None,
            "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        }
        self._queue_max = {}
        self.rows.append(row)
        self.write()
        if self.on_minute is not None:
            self.on_minute(row)

    def _pooled_p99(self, minutes: list[int], column: int = 0) -> float | None:
        """p99 over the pooled samples of `minutes`; column 0 wall latency, 2 CPU time."""
        pooled = [self.samples[i][column] for i in minutes if i < len(self.samples)]
        values = np.concatenate(pooled) if pooled else np.zeros(0, dtype=np.int64)
        return _ms_stats(values)["p99"]

    def _window_mean(self, minutes: range, key: str) -> float | None:
        values = [self.rows[i][key] for i in minutes if self.rows[i].get(key) is not None]
        return round(float(np.mean(values)), 2) if values else None

    def targets(self) -> dict[str, Any]:
        rows = self.rows
        n = len(rows)
        ticks = sum(r["ticks"] for r in rows)
        published = sum(r["published"] for r in rows)
        other = sum(r["other_fallbacks"] for r in rows)
        boundary = sum(r["boundary_fallbacks"] for r in rows)
        out: dict[str, Any] = {}
        w = self.warmup_minutes
        if n > w:
            start, end = rows[w - 1]["rss_mb"], rows[-1]["rss_mb"]
            growth = 100.0 * (end - start) / start
            peak = max(r["rss_mb"] for r in rows[w:])
            out["rss_growth"] = {
                "target": f"RSS at the end <= {MAX_RSS_GROWTH_PCT:g} % above RSS after "
                f"the {w}-minute warm-up",
                "after_warmup_mb": start,
                "end_mb": end,
                "peak_after_warmup_mb": peak,
                "growth_pct": round(growth, 2),
                "met": growth <= MAX_RSS_GROWTH_PCT,
            }
        else:
            out["rss_growth"] = {"met": None, "why": f"needs more than {w} minute(s)"}
        win = min(self.window_minutes, n)
        if win:
            first = self._pooled_p99(list(range(win)))
            last = self._pooled_p99(list(range(n - win, n)))
            change = None if not first or last is None else 100.0 * (last - first) / first
            out["latency_p99_drift"] = {
                "target": f"plan latency p99 of the last {win} minute(s) within "
                f"{MAX_P99_CHANGE_PCT:g} % of the first {win}",
                "window_minutes": win,
                "first_p99_ms": first,
                "last_p99_ms": last,
                "change_pct": None if change is None else round(change, 2),
                "overlapping": 2 * win > n,
                # context on a shared machine: CPU per plan and load in the same windows
                "first_cpu_ms_per_plan": self._window_mean(range(win), "cpu_ms_per_plan"),
                "last_cpu_ms_per_plan": self._window_mean(range(n - win, n), "cpu_ms_per_plan"),
                "first_load_avg": self._window_mean(range(win), "load_avg_1m"),
                "last_load_avg": self._window_mean(range(n - win, n), "load_avg_1m"),
                "met": None if change is None else abs(change) <= MAX_P99_CHANGE_PCT,
            }
            # the same on the planning thread's CPU time: drift of the software itself (a
            # growing cache, a longer prompt), not of the wait for a core
            first_cpu = self._pooled_p99(list(range(win)), column=2)
            last_cpu = self._pooled_p99(list(range(n - win, n)), column=2)
            cpu_change = (
                None
                if not first_cpu or last_cpu is None
                else 100.0 * (last_cpu - first_cpu) / first_cpu
            )
            out["plan_cpu_p99_drift"] = {
                "target": f"plan CPU time p99 of the last {win} minute(s) within "
                f"{MAX_P99_CHANGE_PCT:g} % of the first {win}",
                "first_p99_ms": first_cpu,
                "last_p99_ms": last_cpu,
                "change_pct": None if cpu_change is None else round(cpu_change, 2),
                "met": None if cpu_change is None else abs(cpu_change) <= MAX_P99_CHANGE_PCT,
            }
        out["every_tick_publishes"] = {
            "target": "every control period ticks and publishes (no gap, the clock never back)",
            "ticks": ticks,
            "published": published,
            "tick_gaps": self.tick_gaps,
            "clock_backwards": self.clock_backwards,
            "time_jumps": self.runtime_counters.get("time_jumps"),
            "met": bool(ticks)
            and published == ticks
            and self.tick_gaps == 0
            and self.clock_backwards == 0
            and not self.runtime_counters.get("time_jumps"),
        }
        out["fallbacks_beyond_loop_boundaries"] = {
            "target": "0 fallback ticks outside the first "
            f"{self.boundary_ns / 1e9:g} s of a pass over the bag",
            "boundary_fallbacks": boundary,
            "other_fallbacks": other,
            "met": other == 0,
        }
        return out

    def summary(self) -> dict[str, Any]:
        rows = self.rows
        pooled = [s[0] for s in self.samples]
        ticks_pooled = [s[1] for s in self.samples]
        lat = _ms_stats(np.concatenate(pooled)) if pooled else _ms_stats(np.zeros(0))
        cpu_pooled = [s[2] for s in self.samples]
        plan_cpu = _ms_stats(np.concatenate(cpu_pooled)) if cpu_pooled else _ms_stats(np.zeros(0))
        tick = _ms_stats(np.concatenate(ticks_pooled)) if ticks_pooled else _ms_stats(np.zeros(0))
        queues: dict[str, int] = {}
        for r in rows:
            for k, v in r["queues"].items():
                queues[k] = max(queues.get(k, 0), v)
        return {
            "virtual_minutes": round(
                0.0
                if self.t0 is None or self.last_now is None
                else min(self.end_ns, self.last_now - self.t0 + self.period_ns) / MINUTE_NS,
                3,
            ),  # fmt: skip
            "minutes_recorded": len(rows),
            "loops": self.last_loop + 1,
            "ticks": sum(r["ticks"] for r in rows),
            "published": sum(r["published"] for r in rows),
            "plans": sum(r["plans"] for r in rows),
            "fallbacks": sum(r["fallbacks"] for r in rows),
            "boundary_fallbacks": sum(r["boundary_fallbacks"] for r in rows),
            "plan_latency_ms": lat,
            "plan_cpu_ms": plan_cpu,
            "tick_ms": tick,
            "rss_start_mb": round(self.rss_start_mb, 2),
            "rss_end_mb": rows[-1]["rss_mb"] if rows else None,
            "heap_objects_end": rows[-1]["heap_objects"] if rows else None,
            "queues_max": dict(sorted(queues.items())),
            "wall_s": round(time.perf_counter() - self.wall_start, 1),
        }

    def metrics(self) -> dict[str, Any]:
        targets = self.targets()
        checked = [t["met"] for t in targets.values() if t.get("met") is not None]
        return {
            **self.meta,
            "minutes": self.minutes,
            "complete": self.done and not self.interrupted,
            "interrupted": self.interrupted,
            "warmup_minutes": self.warmup_minutes,
            "window_minutes": self.window_minutes,
            "loop_boundary_s": self.boundary_ns / 1e9,
            "loop_starts_ns": self.loop_starts_ns[: self.last_loop + 1],
            "summary": self.summary(),
            "targets": targets,
            "targets_met": bool(checked) and all(checked),
            "runtime_counters": self.runtime_counters,
            "minutes_rows": self.rows,
        }

    def write(self) -> Path:
        path = self.out_dir / "metrics.json"
        write_atomic(path, (json.dumps(self.metrics(), indent=2) + "\n").encode())
        return path

    def finish(self, runtime_counters: dict[str, Any], interrupted: bool = False) -> dict:
        """The last (partial) minute, metrics.json, soak.png and report.html."""
        self.interrupted = interrupted
        self.runtime_counters = runtime_counters
        if self._minute.ticks and not self.done:
            self._close_minute()
        metrics = self.metrics()
        write_atomic(self.out_dir / "metrics.json", (json.dumps(metrics, indent=2) + "\n").encode())
        png = soak_plot(self.rows)
        write_atomic(self.out_dir / "soak.png", png)
        write_atomic(self.out_dir / "report.html", soak_report(metrics, png).encode())
        return metrics


# -------------------------------------------------------------------- plot and report


def soak_plot(rows: list[dict[str, Any]]) -> bytes:
    """RSS, heap objects, latency and fallbacks per virtual minute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minute = [r["minute"] for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(7, 8), sharex=True)
    axes[0].plot(minute, [r["rss_mb"] for r in rows], ".-")
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].plot(minute, [r["heap_objects"] for r in rows], ".-", color="tab:purple")
    axes[1].set_ylabel("heap objects")

    def col(key: str, stat: str) -> list[float]:
        return [np.nan if r[key][stat] is None else r[key][stat] for r in rows]

    axes[2].plot(minute, col("plan_latency_ms", "p50"), ".-", label="plan p50")
    axes[2].plot(minute, col("plan_latency_ms", "p99"), ".-", label="plan p99")
    if all("plan_cpu_ms" in r for r in rows):
        axes[2].plot(minute, col("plan_cpu_ms", "p99"), ".-", label="plan CPU p99")
    axes[2].plot(minute, col("tick_ms", "p99"), ".-", label="tick p99")
    axes[2].set_ylabel("ms")
    axes[2].legend(fontsize=7, ncol=4)
    axes[3].bar(minute, [r["boundary_fallbacks"] for r in rows], color="tab:orange",
                label="at a loop boundary")  # fmt: skip
    axes[3].bar(minute, [r["other_fallbacks"] for r in rows],
                bottom=[r["boundary_fallbacks"] for r in rows], color="tab:red", label="other")  # fmt: skip
    axes[3].set_ylabel("fallback ticks")
    axes[3].legend(fontsize=7)
    axes[3].set_xlabel("virtual minute")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def summary_lines(metrics: dict[str, Any], every: int = 10) -> list[str]:
    """The per-`every`-minute table and the targets, as printed and in the report."""
    rows = metrics["minutes_rows"]
    head = (f"{'minutes':>9} {'RSS MiB':>8} {'heap obj':>9} {'plan p50':>9} {'p99 max':>9} "
            f"{'CPU p99':>9} {'tick p99':>9} {'CPU/plan':>9} {'load':>5} {'ticks':>6} {'publ.':>6} "
            f"{'fallb.':>6} {'at loop':>7}")  # fmt: skip
    lines = [head]
    for start in range(0, len(rows), every):
        chunk = rows[start : start + every]
        inf = [r["plan_latency_ms"] for r in chunk if r["plan_latency_ms"]["p50"] is not None]
        p50 = np.median([s["p50"] for s in inf]) if inf else math.nan
        p99 = max((s["p99"] for s in inf), default=math.nan)
        tick99 = max((r["tick_ms"]["p99"] or 0.0 for r in chunk), default=math.nan)
        cpu99 = max(
            ((r.get("plan_cpu_ms") or {}).get("p99") or 0.0 for r in chunk), default=math.nan
        )
        cpu = [r["cpu_ms_per_plan"] for r in chunk if r.get("cpu_ms_per_plan") is not None]
        load = [r["load_avg_1m"] for r in chunk if r.get("load_avg_1m") is not None]
        cpu_ms = float(np.mean(cpu)) if cpu else math.nan
        load_avg = float(np.mean(load)) if load else math.nan
        lines.append(
            f"{chunk[0]['minute']:>4}-{chunk[-1]['minute']:<4} {chunk[-1]['rss_mb']:>8.1f} "
            f"{chunk[-1]['heap_objects']:>9} {p50:>9.1f} {p99:>9.1f} {cpu99:>9.1f} {tick99:>9.2f} "
            f"{cpu_ms:>9.1f} {load_avg:>5.1f} "
            f"{sum(r['ticks'] for r in chunk):>6} {sum(r['published'] for r in chunk):>6} "
            f"{sum(r['fallbacks'] for r in chunk):>6} {sum(r['boundary_fallbacks'] for r in chunk):>7}"
        )
    for name, t in metrics["targets"].items():
        met = {True: "met", False: "MISSED", None: "n/a"}[t.get("met")]
        detail = {k: v for k, v in t.items() if k not in ("target", "met")}
        lines.append(f"  {met:>6}  {name}: {t.get('target', '')}  {json.dumps(detail)}")
    return lines


def soak_report(metrics: dict[str, Any], png: bytes) -> str:
    import base64

    s = metrics["summary"]
    table = html.escape("\n".join(summary_lines(metrics)))
    rows = "".join(
        f"<tr><td>{r['minute']}</td><td>{r['rss_mb']}</td><td>{r['heap_objects']}</td>"
        f"<td>{r['plan_latency_ms']['p50']}</td><td>{r['plan_latency_ms']['p99']}</td>"
        f"<td>{r['tick_ms']['p99']}</td><td>{r['ticks']}</td><td>{r['published']}</td>"
        f"<td>{r['fallbacks']} ({r['boundary_fallbacks']} at a loop)</td>"
        f"<td>{html.escape(json.dumps(r['queues']))}</td></tr>"
        for r in metrics["minutes_rows"]
    )
    state = "complete" if metrics["complete"] else "partial"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>blockplan soak</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}td,th{{padding:2px 8px;
border-bottom:1px solid #ddd;font-size:12px}}img{{max-width:100%}}pre{{font-size:12px}}</style>
</head><body><h1>Soak: {html.escape(str(metrics.get("model", "")))} ({html.escape(str(metrics.get("embodiment", "")))})</h1>
<p>{s["virtual_minutes"]} of {metrics["minutes"]:g} virtual minutes ({state}), {s["loops"]} passes over
{html.escape(str(metrics.get("bag", "")))}, {s["ticks"]} ticks, {s["plans"]} plans, {s["wall_s"]} s of wall time.
Targets {"met" if metrics["targets_met"] else "not all met"}.</p>
<pre>{table}</pre><img src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Per minute</h2><table><tr><th>min</th><th>RSS MiB</th><th>heap objects</th><th>plan p50 ms</th>
<th>plan p99 ms</th><th>tick p99 ms</th><th>ticks</th><th>published</th><th>fallbacks</th><th>queues (max)</th></tr>
{rows}</table></body></html>
"""


# -------------------------------------------------------------------- drivers


def tap_latencies(health: Any, sink: Callable[[str, int], None]) -> None:
    """Hand every latency sample the runtime's `Health` records to `sink` as well."""
    record = health.record_latency

    def tapped(which: str, latency_ns: int) -> None:
        record(which, latency_ns)
        sink(which, latency_ns)

    health.record_latency = tapped


class _MessagePublisher:
    """Builds what a tick publishes (the live node's messages) without writing a bag."""

    def __init__(self, config: PlannerConfig, typestore: Any) -> None:
        from blockplan.bags import TypestoreMessages

        self.ns = TypestoreMessages(typestore)
        self.messages = TickMessages(self.ns, config)
        self.last_published = False

    def copy_input(self, record: BagRecord) -> None:
        pass

    def tf_from_odometry(self, ego: Any, log_time_ns: int) -> None:
        pass

    def tick(self, out: TickOutput, log_time_ns: int) -> None:
        messages = self.messages.tick(out)
        path = messages[0][1] if messages else None
        self.last_published = bool(
            path is not None
            and len(path.poses) > 0
            and all(math.isfinite(p.pose.position.x) for p in path.poses)
        )

    def diagnostics(self, statuses: list[DiagnosticStatusData], stamp_ns: int, log_time_ns: int) -> None:  # fmt: skip
        self.messages.diagnostics(statuses, stamp_ns)


class _SoakReplayer(_Replayer):
    """replay's driver with the soak's recorder in place of the replay log."""

    recorder: SoakRecorder

    def on_tick(self, out: TickOutput, log_time: int) -> None:
        self.publisher.tick(out, log_time)
        self.num_ticks += 1
        if self.num_ticks % self.diag_every == 0:
            statuses = [self.model_status, *self.runtime.diagnostics()]
            self.publisher.diagnostics(statuses, out.now_ns, log_time)
        self.recorder.on_tick(
            out.now_ns, self.publisher.last_published, out.is_fallback, len(out.new_plans)
        )


def _vehicle_queues(runtime: PlannerRuntime) -> Callable[[], dict[str, int]]:
    def depths() -> dict[str, int]:
        window = runtime.window
        latency = getattr(runtime.health, "_latency", {})
        return {
            "frames_buffered": sum(window.buffered(c) for c in window.cameras),
            "ego_history": len(runtime.ego),
            "lane_poses": len(runtime.lane_poses),
            "leads": len(runtime.leads),
            "besides": len(runtime.besides),
            "worker_pending": 0 if runtime.worker.is_idle else 1,
            "events": len(runtime._events),
            "rejected": len(runtime._rejected),
            "latency_samples": sum(len(d) for d in latency.values()),
        }

    return depths


def _bag_span(reader: Any, topics: list[str]) -> tuple[int, int, int]:
    """(first, last header stamp, median stamp step) of the stamped input messages."""
    stamps = []
    for record in reader.records(topics):
        try:
            stamps.append(cdr_header_stamp_ns(record.rawdata))
        except Exception:  # a corrupt record: the runtime counts it in the pass
            continue
    stamps = sorted(s for s in stamps if s > 0)
    if len(stamps) < 2:
        raise ReplayInputError("the bag has fewer than two stamped camera or odometry messages")
    steps = np.diff(np.unique(stamps))
    return stamps[0], stamps[-1], int(np.median(steps)) if steps.size else 1


def soak_vehicle(
    bag: str | Path,
    planner: Any,
    config: PlannerConfig,
    minutes: float,
    out_dir: str | Path,
    meta: dict[str, Any] | None = None,
    boundary_s: float | None = None,
    on_minute: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Soak the vehicle's runtime on `bag` in a loop; returns the metrics (also written)."""
    out_dir = Path(out_dir)
    config = config.with_params({"control.timing": "ideal"})
    limits = RuntimeLimits()
    interrupted = False
    with open_bag_reader(bag) as reader:
        topics = resolve_topics(config, reader.topics)
        if topics.odometry is None or not topics.cameras:
            raise ReplayInputError(f"{bag}: a soak needs odometry and a camera topic")
        stamped = [*topics.cameras, topics.odometry]
        first, last, step = _bag_span(reader, stamped)
        clock = VirtualClock()
        worker = VirtualWorker(planner, "ideal", plan_postprocess(config))
        runtime = PlannerRuntime(config, worker, clock, limits)
        if boundary_s is None:  # the outliers of the jump, then a window and history to fill
            boundary_s = runtime.input_span_s + limits.max_odometry_age_s + 1.0
        recorder = SoakRecorder(
            out_dir,
            minutes,
            runtime.period_ns,
            boundary_s,
            _vehicle_queues(runtime),
            {"embodiment": "vehicle", "bag": str(bag), "rate_hz": config.control.rate_hz,
             "timing": "ideal", "bag_span_s": (last - first) / 1e9, **(meta or {})},
        )  # fmt: skip
        recorder.on_minute = on_minute
        tap_latencies(runtime.health, recorder.on_latency)
        publisher = _MessagePublisher(config, reader.typestore)
        replayer = _SoakReplayer(
            reader, topics, runtime, clock, publisher,  # type: ignore[arg-type]
            [RecordedPath([])], None, weights_of(planner), backend_of(planner),
        )  # fmt: skip
        replayer.recorder, replayer.num_ticks, replayer.synthesize_tf = recorder, 0, False
        loop = 0
        try:
            while not recorder.done:
                offset = loop * (last - first + step)
                recorder.loop_started(loop, first + offset)
                restamp = Restamper(reader, lambda ns, o=offset: ns + o) if offset else None
                for record in reader.records(topics.all):
                    if restamp is not None:
                        record = BagRecord(
                            record.topic,
                            record.msgtype,
                            record.log_time_ns + offset,
                            restamp(record),
                        )
                    replayer.ingest(record)
                    if recorder.done:
                        break
                loop += 1
        except KeyboardInterrupt:
            interrupted = True
        finally:
            runtime.close()
        counters = {k: v for k, v in runtime.metrics().items() if not isinstance(v, dict)}
    return recorder.finish(counters, interrupted)


def soak_robot(
    bag: str | Path,
    planner: Any,
    config: PlannerConfig,
    minutes: float,
    out_dir: str | Path,
    meta: dict[str, Any] | None = None,
    boundary_s: float = 0.25,
    on_minute: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Soak the robot's runtime on a robot bag in a loop, driven as `replay --embodiment
    robot` drives it (a tick per recorded step); returns the metrics (also written)."""
    from blockplan.runtime.robot import RobotRuntime
    from blockplan.sim.robot_bag import read_demo_bag
    from blockplan.types import CameraFrame

    episode = read_demo_bag(bag, tuple(config.camera_names))
    stamps = np.asarray(episode.stamp_ns, dtype=np.int64)
    if stamps.size < 2:
        raise ReplayInputError(f"{bag}: a soak needs a robot bag of two steps or more")
    step = int(np.median(np.diff(stamps)))
    span = int(stamps[-1] - stamps[0])
    clock = VirtualClock(int(stamps[0]))
    runtime = RobotRuntime(config, planner, clock, timing="ideal")
    action_dim = runtime.action_dim

    def depths() -> dict[str, int]:
        newest = runtime.newest
        return {
            "frames_buffered": sum(runtime.window.buffered(c) for c in runtime.window.cameras),
            "recent_chunks": len(runtime.recent),
            "chunk_steps_started": 0 if newest is None else len(newest.started),
            "worker_pending": 0 if runtime.worker.is_idle else 1,
            "events": len(runtime._events),
            "latency_samples": sum(len(d) for d in getattr(runtime.health, "_latency", {}).values()),
        }  # fmt: skip

    recorder = SoakRecorder(
        Path(out_dir), minutes, step, boundary_s, depths,
        {"embodiment": "robot", "bag": str(bag), "rate_hz": 1e9 / step, "timing": "ideal",
         "bag_span_s": span / 1e9, **(meta or {})},
        on_minute=on_minute,
    )  # fmt: skip
    tap_latencies(runtime.health, recorder.on_latency)
    names = tuple(config.robot.joint_name_list)
    render = episode.info.get("render_steps") or [0, 1]
    every = max(1, render[1] - render[0]) if len(render) > 1 else 1
    interrupted = False
    loop = 0
    try:
        while not recorder.done:
            offset = loop * (span + step)
            recorder.loop_started(loop, int(stamps[0]) + offset)
            if episode.instruction:
                runtime.on_instruction(episode.instruction)
            for t, stamp in enumerate(stamps):
                now = int(stamp) + offset
                clock.set(now)
                if t % every == 0:
                    for k, cam in enumerate(config.camera_names):
                        runtime.on_frame(CameraFrame(cam, now, episode.frames[t, k]))
                runtime.on_joint_state(now, names, episode.joints[t])
                out = runtime.tick()
                action = np.asarray(out.action)
                published = action.shape == (action_dim,) and bool(np.isfinite(action).all())
                recorder.on_tick(now, published, out.is_fallback, len(out.new_chunks))
                if recorder.done:
                    break
            loop += 1
    except KeyboardInterrupt:
        interrupted = True
    finally:
        runtime.close()
    counters = {k: v for k, v in runtime.metrics().items() if not isinstance(v, dict)}
    return recorder.finish(counters, interrupted)
