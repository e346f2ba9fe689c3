"""One inference worker: requests go in while it is idle, finished plans come out.

* `ThreadWorker` (live): the planner runs on a thread; a plan is ready when it finishes.
* `VirtualWorker` (replay, tests): the planner runs at submit time and its latency is
  measured; the plan becomes available at the request time (`ideal`, model quality) or one
  measured latency later on the virtual clock (`measured`, the effect of latency). While a
  plan is pending the worker is busy, as a single real worker would be.

The worker also runs the plan's post-processing (`postprocess`: upsampling, rollout
averaging, gates), so its measured latency is the full time until a plan is usable. A planner
exception or a rejected plan becomes an error result (counted and reported by the loop),
never a crash of the control loop.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from blockplan.config import PlannerConfig
from blockplan.runtime.clock import Clock, Stopwatch, default_stopwatch
from blockplan.runtime.planner import RuntimePlanner
from blockplan.runtime.plans import InvalidPlanError, ProcessedPlan, plan_trajectory
from blockplan.types import Observation, Plan

# Turns a finished plan (and the observation it was planned from) into what the loop
# publishes; raises InvalidPlanError to reject it.
Postprocess = Callable[[Plan, Observation], ProcessedPlan | None]


def _no_postprocess(plan: Plan, observation: Observation) -> None:
    return None


def plan_postprocess(config: PlannerConfig) -> Postprocess:
    """The runtime's post-processing of a plan under `config`: `plan_trajectory` with its
    trajectory output, gates, rollout consensus, comfort limits and lane guard."""

    def postprocess(plan: Plan, observation: Observation) -> ProcessedPlan:
        return plan_trajectory(
            plan,
            output=config.trajectory,
            gates=config.gates,
            max_deviation_m=config.rollouts.max_deviation_m,
            comfort=config.comfort,
            observation=observation,
            lane_guard=config.lane_guard,
        )

    return postprocess


log = logging.getLogger(__name__)


class ErrorKind(str, enum.Enum):
    """Why an inference produced nothing to publish."""

    PLANNER = "planner"  # the planner raised (its exception is the result's `error`)
    INVALID_PLAN = "invalid_plan"  # the post-processing rejected the plan (non-finite, gates)


@dataclass(frozen=True)
class InferenceRequest:
    observation: Observation
    requested_ns: int  # clock time of the tick that asked
    epoch: int  # the runtime's time epoch (bumped on every time jump)
    is_degraded: bool = False
    degraded_cameras: tuple[str, ...] = ()  # whose slots hold black frames


@dataclass(frozen=True)
class InferenceResult:
    """plan: the planner's answer (None when it raised); processed: `postprocess(plan)` (None
    when the plan was rejected, or with no post-processing); error_kind: None on success."""

    request: InferenceRequest
    plan: Plan | None
    processed: ProcessedPlan | None
    error_kind: ErrorKind | None
    error: str | None
    latency_ns: int  # measured compute time of the planner call and post-processing
    ready_ns: int  # clock time from which the plan may be used
    # the calling thread's CPU time over the same call: the plan's compute, whatever else
    # shares the machine (all of it with a 1-thread backend; torch or ORT pool threads
    # beyond the caller's are not counted)
    cpu_ns: int = 0


def _run(
    planner: RuntimePlanner,
    postprocess: Postprocess,
    request: InferenceRequest,
    stopwatch: Stopwatch,
    ready_at: Callable[[int], int],
) -> InferenceResult:
    """Plan and post-process `request`; `ready_at(latency_ns)` is the result's `ready_ns`."""
    start, cpu_start = stopwatch(), time.thread_time_ns()
    plan: Plan | None = None
    processed: ProcessedPlan | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    try:
        plan = planner.plan(request.observation)
        processed = postprocess(plan, request.observation)
    except InvalidPlanError as e:
        error_kind, error = ErrorKind.INVALID_PLAN, str(e)
    except Exception as e:  # the loop must keep its rate: report, count, fall back
        log.exception("planner failed on the observation at %d ns", request.observation.stamp_ns)
        plan, error_kind, error = None, ErrorKind.PLANNER, f"{type(e).__name__}: {e}"
    latency_ns = stopwatch() - start
    cpu_ns = time.thread_time_ns() - cpu_start
    return InferenceResult(
        request, plan, processed, error_kind, error, latency_ns, ready_at(latency_ns), cpu_ns
    )


def forget_timeline(planner: RuntimePlanner) -> None:
    """A request of a new epoch (the runtime reset after a time jump): the planner forgets
    what carried over from the old timeline (streamed frames, the previous answer it drafts
    from) before planning it, keeping its counters, so that what it plans depends only on
    the requests of this timeline, live as in replay."""
    forget = getattr(planner, "reset_stream", None) or getattr(planner, "reset", None)
    if forget is None:
        return  # a planner without carry-over (a scripted one)
    try:
        forget()
    except Exception:  # the worker must go on: the plan itself reports what is wrong
        log.exception("the planner could not forget the old timeline")


class InferenceWorker(Protocol):
    """What `PlannerRuntime` drives: one request at a time, results polled at each tick."""

    planner: RuntimePlanner

    @property
    def is_idle(self) -> bool: ...

    def submit(self, request: InferenceRequest) -> None: ...

    def poll(self, now_ns: int) -> list[InferenceResult]: ...

    def close(self) -> None: ...


class VirtualWorker:
    """Deterministic timing on a virtual clock (see the module docstring)."""

    def __init__(
        self,
        planner: RuntimePlanner,
        timing: str = "ideal",
        postprocess: Postprocess = _no_postprocess,
        stopwatch: Stopwatch = default_stopwatch,
    ) -> None:
        if timing not in ("ideal", "measured"):
            raise ValueError(f"VirtualWorker: timing={timing!r} must be 'ideal' or 'measured'")
        self.planner = planner
        self.postprocess = postprocess
        self.timing = timing
        self.stopwatch = stopwatch
        self._pending: InferenceResult | None = None
        self._epoch = 0  # the epoch of the last request (the runtime starts at 0)

    @property
    def is_idle(self) -> bool:
        return self._pending is None

    def submit(self, request: InferenceRequest) -> None:
        if self._pending is not None:
            raise RuntimeError("VirtualWorker.submit while busy")
        measured = self.timing == "measured"
        if request.epoch != self._epoch:
            forget_timeline(self.planner)
            self._epoch = request.epoch
        self._pending = _run(
            self.planner,
            self.postprocess,
            request,
            self.stopwatch,
            lambda latency_ns: request.requested_ns + (latency_ns if measured else 0),
        )

    def poll(self, now_ns: int) -> list[InferenceResult]:
        pending = self._pending
        if pending is None:
            return []
        if now_ns < pending.request.requested_ns:  # the clock jumped back: drop it
            self._pending = None
            return [pending]
        if now_ns >= pending.ready_ns:
            self._pending = None
            return [pending]
        return []

    def close(self) -> None:
        self._pending = None


class ThreadWorker:
    """The planner on one background thread (live node)."""

    def __init__(
        self,
        planner: RuntimePlanner,
        clock: Clock,
        postprocess: Postprocess = _no_postprocess,
        stopwatch: Stopwatch = default_stopwatch,
    ) -> None:
        self.planner = planner
        self.postprocess = postprocess
        self.clock = clock
        self.stopwatch = stopwatch
        self._cond = threading.Condition()
        self._request: InferenceRequest | None = None
        self._busy = False
        self._done: list[InferenceResult] = []
        self._closed = False
        self._epoch = 0  # the epoch of the last request, read on the inference thread only
        self._thread = threading.Thread(target=self._run, name="blockplan-inference", daemon=True)
        self._thread.start()

    @property
    def is_idle(self) -> bool:
        with self._cond:
            return not self._busy and not self._closed

    @property
    def thread_ident(self) -> int | None:
        """The inference thread's id (`time.pthread_getcpuclockid` measures its CPU time)."""
        return self._thread.ident

    def submit(self, request: InferenceRequest) -> None:
        with self._cond:
            if self._busy:
                raise RuntimeError("ThreadWorker.submit while busy")
            if self._closed:
                raise RuntimeError("ThreadWorker.submit after close")
            self._request, self._busy = request, True
            self._cond.notify()

    def poll(self, now_ns: int) -> list[InferenceResult]:
        with self._cond:
            done, self._done = self._done, []
        return done

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until the current request is finished (tests, shutdown)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout=timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._request is not None or self._closed)
                if self._closed:
                    return
                request, self._request = self._request, None
            assert request is not None
            if request.epoch != self._epoch:
                forget_timeline(self.planner)
                self._epoch = request.epoch
            result = _run(
                self.planner,
                self.postprocess,
                request,
                self.stopwatch,
                lambda _latency_ns: self.clock.now_ns(),
            )
            with self._cond:
                self._done.append(result)
                self._busy = False
                self._cond.notify_all()

    def close(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)
