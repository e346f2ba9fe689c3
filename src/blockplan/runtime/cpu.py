"""CPU time of the process and of the inference thread, between two readings (ROS-free).

The live node reports it on /diagnostics (`blockplan: node`): what the node costs besides
inference (message conversion, image decoding, ticks, publishing, the executor) is the
process's CPU time minus the inference worker thread's. Torch intra-op threads beyond the
worker thread (`model.num_threads` > 1) count as "besides inference".
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSample:
    """CPU over `wall_s`: the process, the inference thread, and the rest, in percent of one
    core; `other_ms_per_tick` is the rest per control tick (when ticks were counted)."""

    wall_s: float
    process_percent: float
    inference_percent: float
    other_percent: float
    other_ms_per_tick: float | None

    def values(self) -> dict[str, float | str]:
        return {
            "cpu_percent": round(self.process_percent, 2),
            "inference_cpu_percent": round(self.inference_percent, 2),
            "other_cpu_percent": round(self.other_percent, 2),
            "other_cpu_ms_per_tick": "n/a"
            if self.other_ms_per_tick is None
            else round(self.other_ms_per_tick, 3),
            "window_s": round(self.wall_s, 3),
        }


class CpuMeter:
    """`sample(ticks)` returns the CPU used since the previous sample (or construction)."""

    def __init__(self, inference_thread: int | None = None) -> None:
        self._clock_id: int | None = None
        if inference_thread is not None:
            try:
                self._clock_id = time.pthread_getcpuclockid(inference_thread)
            except (OSError, AttributeError):  # not Linux / the thread is gone
                self._clock_id = None
        self._last = self._read()
        self._last_ticks: int | None = None

    def _thread_ns(self) -> int:
        if self._clock_id is None:
            return 0
        try:
            return time.clock_gettime_ns(self._clock_id)
        except OSError:  # the thread ended
            self._clock_id = None
            return 0

    def _read(self) -> tuple[int, int, int]:
        return time.monotonic_ns(), time.process_time_ns(), self._thread_ns()

    def sample(self, ticks: int | None = None) -> CpuSample:
        wall, process, thread = self._read()
        wall0, process0, thread0 = self._last
        self._last = (wall, process, thread)
        span = max(wall - wall0, 1)
        inference = max(thread - thread0, 0)
        other = max(process - process0 - inference, 0)
        per_tick = None
        if ticks is not None and self._last_ticks is not None and ticks > self._last_ticks:
            per_tick = other / 1e6 / (ticks - self._last_ticks)
        self._last_ticks = ticks
        return CpuSample(
            wall_s=span / 1e9,
            process_percent=100.0 * (process - process0) / span,
            inference_percent=100.0 * inference / span,
            other_percent=100.0 * other / span,
            other_ms_per_tick=per_tick,
        )
