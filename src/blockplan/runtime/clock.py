"""Clocks handed to the runtime: the core never reads the wall clock on its own.

`Clock.now_ns()` is the control loop's notion of now (ROS time live, the bag's sensor time in
replay). Latency is measured separately with a `Stopwatch` (a monotonic counter), so virtual
time and measured compute time never mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

Stopwatch = Callable[[], int]  # monotonic nanoseconds, only differences are meaningful


def default_stopwatch() -> int:
    """The process's monotonic performance counter, in nanoseconds."""
    return time.perf_counter_ns()


class Clock(Protocol):
    def now_ns(self) -> int: ...


class SystemClock:
    """Wall-clock time (POSIX nanoseconds); the live node passes its ROS clock instead."""

    def now_ns(self) -> int:
        return time.time_ns()


class VirtualClock:
    """A clock that moves only when told to (replay, tests). It may be set backwards: the
    runtime treats that as a time jump (a looping bag)."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now = int(start_ns)

    def now_ns(self) -> int:
        return self._now

    def set(self, now_ns: int) -> None:
        self._now = int(now_ns)

    def advance(self, delta_ns: int) -> None:
        if delta_ns < 0:
            raise ValueError(f"VirtualClock.advance: delta_ns={delta_ns} must be >= 0")
        self._now += int(delta_ns)
