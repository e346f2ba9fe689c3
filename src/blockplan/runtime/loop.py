"""The fixed-rate control loop (docs/DESIGN.md §5), ROS-free.

Inputs arrive through `on_frame`, `on_odometry`, `on_route_command`, `on_lane_pose`,
`on_lead`, `on_beside`, `on_route` and `on_invalid_input` (from subscription callbacks live,
from the bag in replay). A timer calls
`tick()` at `control.rate_hz`; every tick publishes, whatever inference costs:

1. snapshot the frame window and the ego history at now;
2. collect finished plans; if the worker is idle, the window's newest frame is newer than the
   last request's and the window is usable under the stale camera policy (wait / degrade /
   fallback), hand it a new observation;
3. publish the newest valid plan stitched to now and the current ego state, or the fallback
   when there is none younger than `max_plan_age_s` (or the policy demands it).

A stamp or clock far behind the newest one is a time jump: buffers, plans and the held
fallback plan are reset and in-flight results from before the jump are discarded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import numpy as np

from blockplan.config import PlannerConfig
from blockplan.runtime.clock import Clock, Stopwatch, default_stopwatch
from blockplan.runtime.core import RuntimeCore
from blockplan.runtime.diagnostics import diagnostic_statuses
from blockplan.runtime.ego import EgoHistory, OdometryResult
from blockplan.runtime.frames import WindowSnapshot
from blockplan.runtime.health import Count, DiagnosticStatusData, InvalidInput
from blockplan.runtime.limits import RuntimeLimits
from blockplan.runtime.output import Published, TickOutput, choose_trajectory
from blockplan.runtime.planner import HistorySpec, history_spec
from blockplan.runtime.plans import AcceptedPlan, PlanWindow, RejectedPlan
from blockplan.runtime.stamped import StampedInputs
from blockplan.runtime.worker import ErrorKind, InferenceRequest, InferenceResult, InferenceWorker
from blockplan.trajectory import Fallback, Pose2D
from blockplan.trajectory.route import route_ahead
from blockplan.types import DEFAULT_ROUTE_COMMAND, EgoState, Observation, seconds_to_ns

log = logging.getLogger(__name__)

_DROPPED_ODOMETRY = {
    OdometryResult.OUT_OF_ORDER: Count.OUT_OF_ORDER_ODOMETRY,
    OdometryResult.DUPLICATE: Count.DUPLICATE_ODOMETRY,
    OdometryResult.RESTARTED: Count.ODOMETRY_RESTARTS,
}
_INVALID_ODOMETRY = {
    OdometryResult.NONFINITE: InvalidInput.ODOMETRY_NONFINITE,
    OdometryResult.OUTLIER: InvalidInput.ODOMETRY_OUTLIER,
}


class PlannerRuntime(RuntimeCore):
    """Buffers, worker, stitching, fallback and health behind one object."""

    def __init__(
        self,
        config: PlannerConfig,
        worker: InferenceWorker,
        clock: Clock,
        limits: RuntimeLimits | None = None,
        stopwatch: Stopwatch = default_stopwatch,
        request_windows: Iterable[PlanWindow] | None = None,
    ) -> None:
        """worker: runs `worker.planner` with the post-processing of `config`
        (`plan_postprocess(config)`): a `ThreadWorker` live, a `VirtualWorker` on a virtual
        clock (replay, closed loop, tests; docs/DESIGN.md §5). The runtime closes it.
        request_windows: when given, requests are made only for these windows, once each,
        with exactly their frames, ego stamps and route command, when the newest frame
        reaches their stamp (replay following a live run's requests, docs/RUNTIME.md "Live
        and offline")."""
        super().__init__(config, worker, clock, limits, stopwatch)
        planner = worker.planner
        fw = config.frame_window
        # The ego history exactly as the model was trained with it (its schema's rows and
        # spacing; sim/labels.py samples the recorded states at those times). The buffer
        # reaches back over that span from a window stamp up to max_frame_age_s old, with
        # a second of slack for the odometry rate.
        self.history: HistorySpec = history_spec(planner)
        self.ego = EgoHistory(self.limits, self.history.span_s + fw.max_frame_age_s + 1.0)
        # The stop keeps to the comfort jerk where it can (a fallback is not an emergency).
        self.fallback = Fallback(config.fallback, config.trajectory, config.comfort)
        self.route_command = DEFAULT_ROUTE_COMMAND
        # The commands the planner's prompt knows (None: it takes any, e.g. a baseline): any
        # other is refused on arrival rather than failing every plan until the next one.
        commands = getattr(getattr(planner, "schema", None), "route_commands", None)
        self.route_commands: tuple[str, ...] | None = None if commands is None else tuple(commands)
        # The recent lane poses (offset, heading error) and cars ahead (gap, speed), 256 each:
        # over their max age even at 1 kHz. Only a planner whose ego encoder reads them is
        # given one (model/ego.py).
        limits = self.limits
        self.lane_poses: StampedInputs[tuple[float, float]] = StampedInputs(
            limits.max_lane_pose_age_s, limits.time_jump_s
        )
        self.leads: StampedInputs[tuple[float, float]] = StampedInputs(
            limits.max_lead_age_s, limits.time_jump_s
        )
        self.reads_lane_pose = bool(getattr(planner, "reads_lane_pose", False))
        self.reads_lead = bool(getattr(planner, "reads_lead", False))
        # The lanes beside: (2, 5) per side, lanes then the cars ahead and behind.
        self.besides: StampedInputs[tuple[tuple[float, ...], ...]] = StampedInputs(
            limits.max_beside_age_s, limits.time_jump_s
        )
        self.reads_beside = bool(getattr(planner, "reads_beside", False))
        # The router's path: (P, 2) points in odom, read at t0 as the route ahead.
        self.routes: StampedInputs[np.ndarray] = StampedInputs(
            limits.max_route_age_s, limits.time_jump_s, maxlen=32
        )
        self.reads_route = bool(getattr(planner, "reads_route", False))
        # The lane guard checks every plan against them too, whatever the model reads.
        self.uses_beside = self.reads_beside or config.lane_guard.enabled
        self.newest: AcceptedPlan | None = None
        self.last_output: TickOutput | None = None
        # The last published trajectory and the ego pose at its stamp: the next one
        # continues from it (`trajectory.stitch_from`); forgotten with the timeline.
        self._published: Published | None = None
        self._rejected: list[RejectedPlan] = []
        self._schedule: dict[int, PlanWindow] | None = None
        # (stamp, degraded?) of this epoch's last request: a window whose newest frame is not
        # newer is not planned again (its plan would be dropped as adding nothing).
        self._last_request: tuple[int, bool] | None = None
        # The counters at the previous diagnostics snapshot: what happened since is reported.
        self._reported_counts: dict[str, int] = {}
        if request_windows is not None:
            self._schedule = {w.stamp_ns: w for w in request_windows}

    @property
    def input_span_s(self) -> float:
        """How far back one observation reaches: the frame window or the ego history,
        whichever is longer (a driver feeding inputs starts at least this early)."""
        fw = self.config.frame_window
        return max((fw.num_frames - 1) * fw.frame_period_s, self.history.span_s)

    # ---------------------------------------------------------------- inputs (any thread)

    def on_odometry(self, ego: EgoState) -> OdometryResult:
        result = self.ego.push(ego)
        if result == OdometryResult.TIME_JUMP:
            self.reset(f"odometry stamp jumped back to {ego.stamp_ns} ns")
            result = self.ego.push(ego)
        if result in _INVALID_ODOMETRY:
            self.on_invalid_input(_INVALID_ODOMETRY[result], f"odometry at {ego.stamp_ns} ns")
        elif result in _DROPPED_ODOMETRY:
            self.health.count(_DROPPED_ODOMETRY[result])
        return result

    def on_route_command(self, command: str) -> None:
        """The route command of the next requests; one the planner does not know is an
        invalid input (the previous command stays)."""
        if self.route_commands is not None and command not in self.route_commands:
            self.on_invalid_input(
                InvalidInput.UNKNOWN_ROUTE_COMMAND,
                f"route command {command[:40]!r}: not one of {list(self.route_commands)}; "
                f"keeping {self.route_command!r}",
            )
            return
        self.route_command = command

    def on_lane_pose(self, stamp_ns: int, offset_m: float, heading_error_rad: float) -> None:
        """The ego's pose in its lane from the localisation: left-positive offset from the
        lane centre and heading error against the lane."""
        pose = (float(offset_m), float(heading_error_rad))
        if not all(math.isfinite(v) for v in pose):
            self.on_invalid_input(InvalidInput.LANE_POSE_NONFINITE, f"lane pose at {stamp_ns} ns")
            return
        with self._lock:
            self.lane_poses.push(stamp_ns, pose)  # a late or re-sent one is dropped

    def on_lead(self, stamp_ns: int, gap_m: float, speed_mps: float) -> None:
        """The car ahead in the ego's lane from the tracker: the gap (m; infinite when no car
        is ahead) and its speed (m/s, not read without a car)."""
        gap, speed = float(gap_m), float(speed_mps)
        if math.isnan(gap) or gap <= 0 or (math.isfinite(gap) and not math.isfinite(speed)):
            self.on_invalid_input(
                InvalidInput.LEAD_INVALID, f"car ahead at {stamp_ns} ns: gap {gap}, speed {speed}"
            )
            return
        with self._lock:
            self.leads.push(stamp_ns, (gap, speed if math.isfinite(gap) else math.nan))

    def on_beside(self, stamp_ns: int, beside: np.ndarray) -> None:
        """The lanes beside the ego's (bags/beside.py): per side (left, right) the lane count
        from the map, then the gap to the nearest car ahead in the lane line beside, its
        speed, the gap to the nearest car behind, its speed, from the tracker. NaN: what the
        sender does not know (a whole side's lane count, or its cars); an infinite gap: no
        car there (its speed not read)."""
        report = _checked_beside(beside)
        if isinstance(report, str):
            what = f"lanes beside at {stamp_ns} ns: {report}"
            self.on_invalid_input(InvalidInput.BESIDE_INVALID, what)
            return
        with self._lock:
            self.besides.push(stamp_ns, report)

    def on_route(self, stamp_ns: int, path: np.ndarray) -> None:
        """The router's path (/planning/route): the centre line of the lanes to drive, (P, 2)
        points in odom from near the ego to well ahead; read at each request as the route
        ahead (blockplan.trajectory.route)."""
        points = np.array(path, dtype=np.float64)  # a copy
        if points.ndim != 2 or points.shape[1:] != (2,) or len(points) < 2:
            what = f"route at {stamp_ns} ns: shape {points.shape}, expected (P >= 2, 2)"
            self.on_invalid_input(InvalidInput.ROUTE_INVALID, what)
            return
        if not np.isfinite(points).all():
            self.on_invalid_input(InvalidInput.ROUTE_INVALID, f"route at {stamp_ns} ns: NaN or inf")
            return
        points.setflags(write=False)
        with self._lock:
            self.routes.push(stamp_ns, points)

    def route_ahead_at(
        self, stamp_ns: int, ego: EgoState
    ) -> tuple[tuple[float, float], ...] | None:
        """The route ahead at `stamp_ns` for the ego state `ego` then: `route_ahead` of the
        newest path not after it and at most `max_route_age_s` older; None without one, or
        when the ego is not on it."""
        path = self.routes.at(stamp_ns)
        if path is None:
            return None
        points = route_ahead(path, Pose2D.from_ego_state(ego))
        return None if points is None else tuple((float(x), float(y)) for x, y in points)

    def beside_at(self, stamp_ns: int) -> tuple[tuple[float, ...], ...] | None:
        """The newest lanes-beside report not after `stamp_ns` and at most
        `max_beside_age_s` older, or None."""
        return self.besides.at(stamp_ns)

    def lane_pose_at(self, stamp_ns: int) -> tuple[float, float] | None:
        """The newest lane pose not after `stamp_ns` and at most `max_lane_pose_age_s`
        older, or None."""
        return self.lane_poses.at(stamp_ns)

    def lead_at(self, stamp_ns: int) -> tuple[float, float] | None:
        """The newest car-ahead report not after `stamp_ns` and at most `max_lead_age_s`
        older, or None."""
        return self.leads.at(stamp_ns)

    def _forget_timeline(self) -> None:
        self.ego.clear()
        self.lane_poses.clear()
        self.leads.clear()
        self.besides.clear()
        self.routes.clear()
        self.fallback.reset()
        self._published = None
        self.newest = None
        self._last_request = None

    # ---------------------------------------------------------------- the tick

    def tick(self) -> TickOutput:
        """One control period: snapshot, request, publish (see the module docstring)."""
        with self._lock:
            return self._tick()

    def _tick(self) -> TickOutput:
        start = self.stopwatch()
        now = self._begin_tick()
        snapshot = self.window.snapshot(now)
        new_plans = self._collect(now)
        is_requested, forced_reason, inference_ns = self._maybe_request(now, snapshot)
        if is_requested:
            new_plans += self._collect(now)
        ego_now = self.ego.state_at(now)
        choice = choose_trajectory(
            now, self.newest, self.fallback, ego_now, self.config, forced_reason, self._published
        )
        if ego_now is not None:
            self._published = Published(choice.trajectory, Pose2D.from_ego_state(ego_now))
        if choice.is_fallback:
            self.health.count(Count.FALLBACKS)
        elif choice.source is not None:
            self.health.record_latency("plan_age", max(0, now - choice.source.stamp_ns))
        tick_ns, events = self._end_tick(now, start, inference_ns)
        rejected, self._rejected = tuple(self._rejected), []
        output = TickOutput(
            now_ns=now,
            trajectory=choice.trajectory,
            is_fallback=choice.is_fallback,
            reason=choice.reason,
            source=choice.source,
            new_plans=tuple(new_plans),
            snapshot=snapshot,
            ego=ego_now,
            is_requested=is_requested,
            tick_ns=tick_ns,
            events=events,
            rejected_plans=rejected,
        )
        self.last_output = output
        return output

    def _collect(self, now: int) -> list[AcceptedPlan]:
        accepted = []
        for result in self.worker.poll(now):
            plan = self._accept(result)
            if plan is not None:
                accepted.append(plan)
        return accepted

    def _accept(self, result: InferenceResult) -> AcceptedPlan | None:
        if result.request.epoch != self.epoch:
            self.health.count(Count.DISCARDED_RESULTS)
            return None
        self.health.record_latency("inference", result.latency_ns)
        self.health.record_latency("inference_cpu", result.cpu_ns)
        stages = result.plan.timings_ms if result.plan is not None else {}
        if "encode" in stages and "prefill" in stages:  # what streaming saves
            ms = stages["encode"] + stages.get("prompt", 0.0) + stages["prefill"]
            self.health.record_latency("encode_prefill", int(ms * 1e6))
        if result.latency_ns > self.period_ns:
            self.health.count(Count.INFERENCE_OVERRUNS)
        request = result.request
        window = PlanWindow.of(
            request.observation,
            request.requested_ns,
            request.is_degraded,
            request.degraded_cameras,
        )
        if result.error_kind == ErrorKind.INVALID_PLAN:
            self.health.count(Count.INVALID_PLANS)
            self.last_problem["plan"] = str(result.error)
            self._events.append(f"invalid plan: {result.error}")
            log.debug("invalid plan: %s", result.error)
            if result.plan is not None:
                self._rejected.append(
                    RejectedPlan(
                        result.plan, str(result.error), result.latency_ns, result.ready_ns, window
                    )
                )
            return None
        if result.plan is None or result.processed is None:
            self.health.count(Count.PLANNER_ERRORS)
            self.last_problem["planner"] = result.error or "no plan"
            self._events.append(f"planner error: {result.error}")
            return None
        processed = result.processed
        if self.newest is not None and result.plan.stamp_ns <= self.newest.stamp_ns:
            if result.plan.stamp_ns == self.newest.stamp_ns:  # no newer frame came meanwhile
                self.health.count(Count.UNCHANGED_WINDOW_REPLANS)
            else:
                self.health.count(Count.DISCARDED_RESULTS)  # an older observation finished later
            return None
        pose = Pose2D.from_ego_state(result.request.observation.ego_history[-1])
        accepted = AcceptedPlan(
            plan=result.plan,
            trajectory=processed.trajectory,
            rollouts=processed.rollouts,
            spread=processed.spread,
            pose=pose,
            latency_ns=result.latency_ns,
            ready_ns=result.ready_ns,
            is_degraded=result.request.is_degraded,
            comfort=processed.comfort,
            protocol_xy=None if processed.protocol is None else processed.protocol.xy,
            window=window,
        )
        self.newest = accepted
        self.fallback.remember(processed.trajectory, pose)
        self.health.count(Count.PLANS)
        if processed.guarded:
            self.health.count(Count.GUARDED_ROLLOUTS, processed.guarded)
        if not processed.comfort.ok:  # published all the same: reported, never rejected
            self.health.count(Count.UNCOMFORTABLE_PLANS)
            for check in processed.comfort.failed_checks:
                self.health.count_comfort(check)
        return accepted

    def _maybe_request(self, now: int, snapshot: WindowSnapshot) -> tuple[bool, str | None, int]:
        """(requested?, reason to force a fallback or None, synchronous inference time)."""
        policy = self.config.frame_window.stale_camera_policy
        latest = self.ego.latest
        if latest is None:
            return False, None, 0
        if now - latest.stamp_ns > seconds_to_ns(self.limits.max_odometry_age_s):
            return False, None, 0
        if snapshot.stamp_ns is None:
            return False, None, 0
        scheduled = None
        if self._schedule is not None:
            scheduled = self._schedule.get(snapshot.stamp_ns)
            if scheduled is None:
                return False, None, 0
        is_degraded = False
        if scheduled is None and not snapshot.is_complete:
            bad = ", ".join(snapshot.bad_cameras)
            if policy == "fallback":
                return False, f"cameras stale or missing: {bad} (policy fallback)", 0
            if policy == "wait":
                self.health.count(Count.WAITS)
                return False, None, 0
            is_degraded = True
        if not self.worker.is_idle:
            return False, None, 0
        if self._last_request is not None and snapshot.stamp_ns <= self._last_request[0]:
            # No newer frame since the last request: its plan stands (or was rejected, and
            # the same inputs would be again). Only a degraded window that has since become
            # complete is worth planning again.
            was_degraded = self._last_request[1]
            if not (
                was_degraded and not is_degraded and snapshot.stamp_ns == self._last_request[0]
            ):
                return False, None, 0
        route, degraded = self.route_command, snapshot.bad_cameras if is_degraded else ()
        if scheduled is not None:  # the window as the run we follow had it
            found = self.window.frames_by_stamp(scheduled.frames, scheduled.degraded_cameras)
            if found is None:  # a frame it used is not in this bag: left unrequested
                return False, None, 0
            del self._schedule[snapshot.stamp_ns]  # type: ignore[union-attr]
            frames, route = found, scheduled.route_command
            is_degraded, degraded = scheduled.is_degraded, scheduled.degraded_cameras
        else:
            frames = snapshot.degrade_frames() if is_degraded else snapshot.complete_frames()
        history = self.ego.history(
            snapshot.stamp_ns, self.history.num_states, seconds_to_ns(self.history.period_s)
        )
        lane = self.lane_pose_at(snapshot.stamp_ns) if self.reads_lane_pose else None
        lead = self.lead_at(snapshot.stamp_ns) if self.reads_lead else None
        beside = self.beside_at(snapshot.stamp_ns) if self.uses_beside else None
        ahead = (
            self.route_ahead_at(snapshot.stamp_ns, history[-1])
            if self.reads_route and history
            else None
        )
        observation = Observation(
            snapshot.stamp_ns, frames, history, route, lane, lead, beside, ahead
        )
        self.health.count(Count.REQUESTS)
        if self.reads_lane_pose and lane is None:
            self.health.count(Count.REQUESTS_WITHOUT_LANE_POSE)
        if self.reads_lead and lead is None:
            self.health.count(Count.REQUESTS_WITHOUT_LEAD)
        if self.reads_beside and beside is None:
            self.health.count(Count.REQUESTS_WITHOUT_BESIDE)
        if self.reads_route and ahead is None:
            self.health.count(Count.REQUESTS_WITHOUT_ROUTE)
        if is_degraded:
            self.health.count(Count.DEGRADED_REQUESTS)
        if snapshot.is_padded:
            self.health.count(Count.PADDED_WINDOWS)
        # How much of the window earlier requests already used (the streaming prefill reuses
        # those frames), and how far it is from the trained spacing.
        shared, new = self.window.mark_used(frames)
        self.health.count(Count.WINDOW_FRAMES_SHARED, shared)
        self.health.count(Count.WINDOW_FRAMES_NEW, new)
        if not snapshot.is_padded:  # padding (start-up) is counted on its own
            self.health.record_latency(
                "frame_spacing_error", snapshot.spacing_error_ns(self.window.period_ns)
            )
        self._last_request = (snapshot.stamp_ns, is_degraded)
        start = self.stopwatch()
        self.worker.submit(InferenceRequest(observation, now, self.epoch, is_degraded, degraded))
        return True, None, self.stopwatch() - start

    # ---------------------------------------------------------------- reporting

    @property
    def pending_request_stamps(self) -> list[int]:
        """With `request_windows`: the stamps of those not requested yet (sorted)."""
        return sorted(self._schedule or ())

    def diagnostics(self) -> list[DiagnosticStatusData]:
        """The diagnostics snapshot; `blockplan: inputs` warns about rejections since the
        previous call."""
        counts = self.health.counts()
        statuses = diagnostic_statuses(self, self._reported_counts)
        self._reported_counts = counts
        return statuses

    def metrics(self) -> dict:
        counts = self.health.counts()
        latencies = self.health.latencies_ms()
        return {
            **counts,
            "latency_ms": latencies["inference"],
            "inference_cpu_ms": latencies["inference_cpu"],
            "tick_ms": latencies["tick"],
            "plan_age_ms": latencies["plan_age"],
            "frame_spacing_error_ms": latencies["frame_spacing_error"],
            "encode_prefill_ms": latencies["encode_prefill"],
        }

    def drain(self) -> int:
        """At the end of a replay: account for a plan still in flight (its latency and an
        `unfinished_plans` count; it is never published). Returns how many there were."""
        with self._lock:
            pending = self.worker.poll(2**62)
            for result in pending:
                self.health.record_latency("inference", result.latency_ns)
                self.health.record_latency("inference_cpu", result.cpu_ns)
                self.health.count(Count.UNFINISHED_PLANS)
            return len(pending)


def _checked_beside(beside: np.ndarray) -> tuple[tuple[float, ...], ...] | str:
    """A lanes-beside report as (left, right) rows of 5 floats, or why it is refused: not
    (2, 5); a lane count that is not a whole number >= 0 (NaN: unknown); a negative gap, an
    infinite one below zero, or a car (finite gap) without a finite speed (NaN gaps:
    unknown). A speed with an infinite gap (no car) is not read and stored as NaN."""
    values = np.asarray(beside, dtype=np.float64)
    if values.shape != (2, 5):
        return f"shape {values.shape}, expected (2, 5)"
    values = values.copy()
    lanes = values[:, 0][~np.isnan(values[:, 0])]
    if not np.isfinite(lanes).all() or not ((lanes >= 0) & (lanes == np.round(lanes))).all():
        return f"lane counts {values[:, 0].tolist()}: whole numbers >= 0 or NaN"
    for gap, speed in ((1, 2), (3, 4)):
        gaps, speeds = values[:, gap], values[:, speed]
        if (gaps[~np.isnan(gaps)] < 0).any():
            return f"gaps {gaps.tolist()}: >= 0, inf (no car) or NaN (unknown)"
        car = np.isfinite(gaps)
        if not np.isfinite(speeds[car]).all():
            return f"a car beside without a finite speed: {values.tolist()}"
        values[:, speed] = np.where(car, speeds, np.nan)
    return tuple(tuple(float(v) for v in row) for row in values)
