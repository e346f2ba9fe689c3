"""Health counters and the diagnostics snapshot of the runtime.

Counters only grow. `invalid_inputs` is the sum of every rejected input, each also counted
under its own name (`invalid_image`, `odometry_nonfinite`, …). Latencies keep a bounded window
of recent samples for p50 / p99: `inference` (planner call + post-processing), `tick` (one
tick without the planner) and `plan_age` (age of the published plan).

* `deadline_misses`: ticks whose own work took longer than the control period, or that fired
  more than half a period late (the timer could not keep the rate);
* `inference_overruns`: plans whose inference took longer than one control period;
* `fallbacks`: ticks that published the fallback; `plans`: plans that passed the gates;
* `invalid_plans`: plans rejected by the (hard) validity gates; `planner_errors`: planner
  exceptions; `uncomfortable_plans`: published plans beyond a comfort limit, with one
  `comfort_<check>` count per failed check (`comfort_max_abs_jerk`, …);
* `waits` / `degraded_requests`: ticks where a stale camera held back / degraded a request;
* `time_jumps`: resets after a stamp or the clock went back; `discarded_results`: plans from
  before a reset (or older than the newest) that were dropped; `unchanged_window_replans`:
  plans of the same window as the newest plan (no newer frame came meanwhile), dropped as
  adding nothing;
* `unfinished_plans`: plans still in flight when a replay ended;
* `window_frames_shared` / `window_frames_new`: frames of requested windows that an earlier
  request had used too / had not (streaming reuses the former's K/V).

`frame_spacing_error` (a latency window): per request whose window is not padded, the largest
distance of a window frame from its trained time (newest − k·frame_period_s).
`encode_prefill`: the planner's encode + prompt + prefill stages of every plan (when it
reports them), what the streaming window saves.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# diagnostic_msgs/DiagnosticStatus levels
OK, WARN, ERROR, STALE = 0, 1, 2, 3

COUNTERS = (
    "ticks",
    "plans",
    "fallbacks",
    "deadline_misses",
    "inference_overruns",
    "planner_errors",
    "invalid_plans",
    "uncomfortable_plans",
    "invalid_inputs",
    "requests",
    "degraded_requests",
    "waits",
    "padded_windows",
    "window_frames_shared",
    "window_frames_new",
    "time_jumps",
    "discarded_results",
    "unchanged_window_replans",
    "unfinished_plans",
)


@dataclass(frozen=True)
class DiagnosticStatusData:
    """One diagnostic_msgs/DiagnosticStatus, ROS-free (bags.diagnostics_to_msg converts it)."""

    name: str
    level: int
    message: str
    hardware_id: str = "blockplan"
    values: dict[str, Any] = field(default_factory=dict)


def percentiles_ms(samples_ns: list[int] | deque) -> dict[str, float | None]:
    if not samples_ns:
        return {"p50": None, "p99": None, "max": None}
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    return {
        "p50": round(float(np.percentile(ms, 50)), 3),
        "p99": round(float(np.percentile(ms, 99)), 3),
        "max": round(float(ms.max()), 3),
    }


class Health:
    """Thread-safe counters and latency windows."""

    def __init__(self, latency_window: int = 1000) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter(dict.fromkeys(COUNTERS, 0))
        self._latency: dict[str, deque[int]] = {
            name: deque(maxlen=latency_window)
            for name in ("inference", "tick", "plan_age", "frame_spacing_error", "encode_prefill")
        }

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def count_invalid(self, kind: str) -> None:
        """One rejected input of `kind` (also added to `invalid_inputs`)."""
        with self._lock:
            self._counts[kind] += 1
            self._counts["invalid_inputs"] += 1

    def record_latency(self, which: str, latency_ns: int) -> None:
        with self._lock:
            self._latency[which].append(int(latency_ns))

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def latencies_ms(self) -> dict[str, dict[str, float | None]]:
        with self._lock:
            return {name: percentiles_ms(list(s)) for name, s in self._latency.items()}
