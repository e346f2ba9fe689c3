"""The runtime's health as diagnostic statuses (one per concern), ROS-free.

* `blockplan: control loop` — OK; WARN when the last tick published a fallback, or when the
  runtime reset after a time jump since the previous snapshot (the message says why: the
  clock or a stamp went back); ERROR when the last planner call failed. Values: counters and
  latency percentiles.
* `blockplan: comfort` — OK while the newest plan keeps to the comfort limits (`comfort.*`);
  WARN naming the exceeded checks otherwise (the plan is published all the same: only the
  hard `gates.*` reject). Values: counts and the newest plan's peaks.
* `blockplan: camera <name>` — OK fresh; WARN stale; ERROR never seen. Value: frame age.
* `blockplan: odometry` — OK fresh; WARN stale; ERROR none.
* `blockplan: lane pose`, `blockplan: lead vehicle`, `blockplan: lanes beside`,
  `blockplan: route` — only for a planner that reads them: OK while the newest report is
  recent enough at the tick's time (`max_lane_pose_age_s`, `max_lead_age_s`,
  `max_beside_age_s`, `max_route_age_s`), WARN when none is: the source is silent and the
  planner plans without it (a request counts against the window's stamp:
  `requests_without_*`). Values: the report's age and values (a route: its point count).
* `blockplan: inputs` — WARN while any input has been rejected since the previous snapshot,
  the message naming each kind rejected since then with its newest detail.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from blockplan.runtime.clock import Clock
from blockplan.runtime.ego import EgoHistory
from blockplan.runtime.frames import CameraState, FrameWindow
from blockplan.runtime.health import ERROR, OK, WARN, Count, DiagnosticStatusData, Health
from blockplan.runtime.limits import RuntimeLimits
from blockplan.runtime.output import TickOutput
from blockplan.runtime.plans import AcceptedPlan
from blockplan.runtime.stamped import StampedInputs


class DiagnosedRuntime(Protocol):
    """What the statuses read of a runtime (`runtime/loop.py`'s `PlannerRuntime`)."""

    health: Health
    limits: RuntimeLimits
    clock: Clock
    window: FrameWindow
    ego: EgoHistory
    last_output: TickOutput | None
    last_problem: dict[str, str]
    last_time_jump: str | None
    newest: AcceptedPlan | None
    reads_lane_pose: bool
    reads_lead: bool
    reads_beside: bool
    reads_route: bool
    lane_poses: StampedInputs[tuple[float, float]]
    leads: StampedInputs[tuple[float, float]]
    besides: StampedInputs[tuple[tuple[float, ...], ...]]
    routes: StampedInputs[np.ndarray]


# The lanes beside's values on /diagnostics: per side, bags/beside.py's fields.
BESIDE_VALUES = tuple(
    f"{side}_{name}"
    for side in ("left", "right")
    for name in ("lanes", "gap_ahead_m", "speed_ahead_mps", "gap_behind_m", "speed_behind_mps")
)
_CAMERA_LEVELS = {CameraState.OK: OK, CameraState.STALE: WARN, CameraState.MISSING: ERROR}
_LOOP_COUNTS = (
    Count.TICKS,
    Count.PLANS,
    Count.FALLBACKS,
    Count.DEADLINE_MISSES,
    Count.INFERENCE_OVERRUNS,
    Count.PLANNER_ERRORS,
    Count.INVALID_PLANS,
    Count.UNCOMFORTABLE_PLANS,
    Count.TIME_JUMPS,
)


def diagnostic_statuses(
    runtime: DiagnosedRuntime, previous: dict[str, int]
) -> list[DiagnosticStatusData]:
    """`previous`: the counters at the previous snapshot (`Health.counts()`; empty: none)."""
    counts = runtime.health.counts()
    latency = runtime.health.latencies_ms()
    last = runtime.last_output
    statuses = []

    level, message = OK, "publishing plans"
    if last is None:
        level, message = WARN, "no tick yet"
    elif last.is_fallback:
        level, message = WARN, f"fallback: {last.reason}"
    if last is not None and any(e.startswith("planner error") for e in last.events):
        level, message = ERROR, runtime.last_problem.get("planner", "planner error")
    if counts[Count.TIME_JUMPS.value] > previous.get(Count.TIME_JUMPS.value, 0):
        level = max(level, WARN)
        message = f"time jump, runtime reset: {runtime.last_time_jump}; {message}"
    values: dict[str, object] = {c.value: counts[c.value] for c in _LOOP_COUNTS}
    for which in ("inference", "tick", "plan_age"):
        for stat in ("p50", "p99"):
            value = latency[which][stat]
            values[f"{which}_{stat}_ms"] = "n/a" if value is None else value
    statuses.append(DiagnosticStatusData("blockplan: control loop", level, message, values=values))
    statuses.append(_comfort_status(runtime, counts))

    if last is not None:
        for cam in last.snapshot.cameras:
            age = "n/a" if cam.age_s is None else round(cam.age_s, 3)
            statuses.append(
                DiagnosticStatusData(
                    f"blockplan: camera {cam.camera}",
                    _CAMERA_LEVELS[cam.state],
                    cam.state.value + (" (window padded)" if cam.is_padded else ""),
                    hardware_id=cam.camera,
                    values={"frame_age_s": age, "buffered": runtime.window.buffered(cam.camera)},
                )
            )

    now = last.now_ns if last is not None else runtime.clock.now_ns()
    age = runtime.ego.age_s(now)
    if age is None:
        level, message = ERROR, "no odometry"
    elif age > runtime.limits.max_odometry_age_s:
        level, message = WARN, f"odometry {age:.3f} s old"
    else:
        level, message = OK, "fresh"
    statuses.append(
        DiagnosticStatusData(
            "blockplan: odometry",
            level,
            message,
            values={"age_s": "n/a" if age is None else round(age, 3)},
        )
    )

    limits = runtime.limits
    optional = (  # (read?, name, buffer, max age, value names, requests without it)
        (runtime.reads_lane_pose, "lane pose", runtime.lane_poses, limits.max_lane_pose_age_s,
         ("offset_m", "heading_error_rad"), Count.REQUESTS_WITHOUT_LANE_POSE),
        (runtime.reads_lead, "lead vehicle", runtime.leads, limits.max_lead_age_s,
         ("gap_m", "speed_mps"), Count.REQUESTS_WITHOUT_LEAD),
        (runtime.reads_beside, "lanes beside", runtime.besides, limits.max_beside_age_s,
         BESIDE_VALUES, Count.REQUESTS_WITHOUT_BESIDE),
        (runtime.reads_route, "route", runtime.routes, limits.max_route_age_s,
         None, Count.REQUESTS_WITHOUT_ROUTE),
    )  # fmt: skip
    for reads, what, buffer, max_age, names, without in optional:
        if reads:
            statuses.append(
                _optional_status(what, buffer.newest(), now, max_age, names, without, counts)
            )

    inputs = runtime.health.input_counts()
    new = {k: n - previous.get(k, 0) for k, n in counts.items() if k in inputs}
    rejected = sorted(k for k in runtime.last_problem if new.get(k, 0) > 0)
    if counts["invalid_inputs"] > previous.get("invalid_inputs", 0):
        level = WARN
        message = "; ".join(f"{k} x{new[k]}: {runtime.last_problem[k]}" for k in rejected)
        message = message or "inputs rejected since the last snapshot"
    else:
        level = OK
        message = "; ".join(f"{k}: {v}" for k, v in sorted(runtime.last_problem.items())) or "ok"
    statuses.append(DiagnosticStatusData("blockplan: inputs", level, message, values=inputs))
    return statuses


def _optional_status(
    what: str,
    newest: tuple[int, tuple] | None,
    now_ns: int,
    max_age_s: float,
    names: tuple[str, ...] | None,
    without: Count,
    counts: dict[str, int],
) -> DiagnosticStatusData:
    """An optional input the model reads (lane pose, the car ahead, the lanes beside, the
    route): OK while recent enough; its newest values under `names` (a nested report
    flattened; None: a path, reported as its number of points)."""
    values: dict[str, object] = {without.value: counts[without.value]}
    if newest is None:
        message = f"no {what} received: planning without it"
        return DiagnosticStatusData(f"blockplan: {what}", WARN, message, values=values)
    stamp, report = newest
    age = (now_ns - stamp) * 1e-9
    values |= {"age_s": round(age, 3)}
    if names is None:
        values["points"] = len(report)
    else:
        flat = np.asarray(report, dtype=np.float64).reshape(-1).tolist()
        values |= dict(zip(names, flat, strict=True))
    if age > max_age_s:
        message = f"{what} {age:.3f} s old (> {max_age_s:g} s): planning without it"
        return DiagnosticStatusData(f"blockplan: {what}", WARN, message, values=values)
    return DiagnosticStatusData(f"blockplan: {what}", OK, "fresh", values=values)


def _comfort_status(runtime: DiagnosedRuntime, counts: dict[str, int]) -> DiagnosticStatusData:
    newest = runtime.newest
    values: dict[str, object] = {
        "plans": counts["plans"],
        "uncomfortable_plans": counts["uncomfortable_plans"],
        **runtime.health.comfort_counts(),
    }
    if newest is None:
        return DiagnosticStatusData("blockplan: comfort", OK, "no plan yet", values=values)
    traj = newest.trajectory
    speed, accel = np.asarray(traj.speed), np.asarray(traj.accel)
    lateral = np.abs(speed**2 * np.asarray(traj.curvature))
    jerk = np.abs(np.diff(accel) / np.diff(traj.t)) if len(accel) > 1 else np.zeros(1)
    values.update(
        newest_min_accel=round(float(accel.min()), 3),
        newest_max_accel=round(float(accel.max()), 3),
        newest_max_lateral_accel=round(float(lateral.max()), 3),
        newest_max_abs_jerk=round(float(jerk.max()), 3),
    )
    if newest.comfort.ok:
        return DiagnosticStatusData("blockplan: comfort", OK, "within limits", values=values)
    message = f"newest plan beyond comfort limits (published): {newest.comfort.summary()}"
    return DiagnosticStatusData("blockplan: comfort", WARN, message, values=values)
