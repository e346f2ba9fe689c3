"""The fixed-rate control loop of the `robot` embodiment (docs/RUNTIME.md "Robots"), ROS-free.

The vehicle's `PlannerRuntime` and this `RobotRuntime` share the frame window (ring buffers,
stale-camera policy, time jumps), the inference workers (a thread live; the virtual worker in
simulation and replay, `ideal` or `measured` timing), the health counters and the diagnostics
layout. What differs is the state (joint positions instead of odometry), the answer (an
action chunk instead of a trajectory) and what a tick publishes:

1. snapshot the frame window at now; collect finished chunks;
2. request a new chunk when the worker is idle, the cameras are usable, the joint state is
   fresh, and either no chunk is in use or `robot.replan_steps` steps of the newest one have
   started (receding horizon: execute the first k actions, replan);
3. publish the step of the newest chunk that matches now — step ⌊(now − t0)/chunk_period⌋ of
   the chunk observed at t0 (chunk stitching: a newer chunk takes over at its own matching
   index) — or hold position (zero velocity, the gripper as last commanded) when no chunk
   covers now.

A chunk is observed at the stamp of the joint state it was given (its step 0 is the action
for that state, as in the data set) with the newest frames at or before it.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from blockplan.config import PlannerConfig
from blockplan.runtime.clock import Clock, Stopwatch, default_stopwatch
from blockplan.runtime.core import RuntimeCore
from blockplan.runtime.frames import CameraState, WindowSnapshot
from blockplan.runtime.health import ERROR, OK, WARN, DiagnosticStatusData
from blockplan.runtime.limits import RuntimeLimits
from blockplan.runtime.plans import InvalidPlanError
from blockplan.runtime.worker import (
    InferenceRequest,
    InferenceResult,
    InferenceWorker,
    ThreadWorker,
    VirtualWorker,
)
from blockplan.types import ActionPlan, RobotObservation, seconds_to_ns

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JointSample:
    stamp_ns: int
    positions: np.ndarray  # (S,) in robot.joint_names order


@dataclass(frozen=True)
class RobotTick:
    """What one tick publishes: `action` (D,) — the stitched chunk step or the hold."""

    now_ns: int
    action: np.ndarray
    is_fallback: bool
    reason: str
    source: ActionPlan | None  # the chunk the action comes from
    step_index: int  # its step in that chunk (-1 for the hold)
    new_chunks: tuple[ActionPlan, ...]
    is_requested: bool
    tick_ns: int
    snapshot: WindowSnapshot
    events: tuple[str, ...] = ()


def check_chunk(plan: ActionPlan, observation: object = None) -> ActionPlan:
    """The robot's post-processing: a chunk must be finite (H, D); else it is rejected (the
    observation it was planned from is not needed)."""
    actions = np.asarray(plan.actions)
    if actions.ndim != 2 or not np.all(np.isfinite(actions)):
        raise InvalidPlanError(f"action chunk {actions.shape} is not a finite (H, D) array")
    return plan


@dataclass
class _Chunk:
    plan: ActionPlan
    latency_ns: int
    started: set[int] = field(default_factory=set)


class RobotRuntime(RuntimeCore):
    """Frame window, joint state, instruction, worker, stitching and hold behind one object."""

    def __init__(
        self,
        config: PlannerConfig,
        planner: object,
        clock: Clock,
        timing: str | None = None,
        limits: RuntimeLimits | None = None,
        stopwatch: Stopwatch = default_stopwatch,
        action_dim: int | None = None,
    ) -> None:
        worker: InferenceWorker
        if timing is None:
            worker = ThreadWorker(planner, clock, check_chunk, stopwatch)
        else:
            worker = VirtualWorker(planner, timing, check_chunk, stopwatch)
        super().__init__(config, worker, clock, limits, stopwatch)
        self.robot = config.robot
        schema = getattr(planner, "schema", None)
        self.action_dim = int(action_dim or getattr(schema, "action_dim", 4))
        self.horizon = int(getattr(schema, "horizon", 0)) or None
        self.proprio_dim = getattr(schema, "proprio_dim", None)
        self.chunk_period_ns = seconds_to_ns(self.robot.chunk_period_s)
        self.instruction = self.robot.instruction
        self.joints: JointSample | None = None
        self.newest: _Chunk | None = None
        # The chunks that may still cover a step (temporal ensembling), oldest first.
        self.recent: deque[ActionPlan] = deque(maxlen=64)
        self.last_gripper = 0.0
        self.last_output: RobotTick | None = None

    # ---------------------------------------------------------------- inputs (any thread)

    def on_joint_state(self, stamp_ns: int, names: list[str] | tuple[str, ...], positions) -> bool:
        """A joint state (any joint order, extra joints ignored). False (and counted) when
        a configured joint is missing, a value is not finite, or the stamp went backwards."""
        try:
            index = {n: i for i, n in enumerate(names)}
            values = np.asarray(positions, dtype=np.float64).reshape(-1)
            if len(values) != len(index):
                raise ValueError(f"{len(index)} names, {len(values)} positions")
            missing = [n for n in self.robot.joint_name_list if n not in index]
            if missing:
                raise ValueError(f"no joint {missing[0]!r} (has {list(names)})")
            state = np.array([values[index[n]] for n in self.robot.joint_name_list])
            if not np.all(np.isfinite(state)):
                raise ValueError("a joint position is not finite")
        except (TypeError, ValueError) as e:
            self.on_invalid_input("invalid_joint_state", f"joint state at {stamp_ns} ns: {e}")
            return False
        previous = self.joints
        if previous is not None and stamp_ns < previous.stamp_ns:
            if previous.stamp_ns - stamp_ns > seconds_to_ns(self.limits.time_jump_s):
                self.reset(f"joint state stamp jumped back to {stamp_ns} ns")
            else:
                self.health.count("out_of_order_joint_states")
                return False
        self.joints = JointSample(int(stamp_ns), state)
        return True

    def on_instruction(self, text: str) -> None:
        text = str(text).strip()
        if not text:
            self.on_invalid_input("invalid_instruction", "empty instruction")
            return
        if text != self.instruction:
            self._events.append(f"instruction: {text}")
        self.instruction = text

    def _forget_timeline(self) -> None:
        self.joints = None
        self.newest = None
        self.recent.clear()

    # ---------------------------------------------------------------- the tick

    def step_of(self, plan: ActionPlan, now_ns: int) -> int:
        """The chunk step that applies at now (may be < 0 or >= H)."""
        return int((now_ns - plan.stamp_ns) // self.chunk_period_ns)

    def tick(self) -> RobotTick:
        with self._lock:
            return self._tick()

    def _tick(self) -> RobotTick:
        start = self.stopwatch()
        now = self._begin_tick()
        snapshot = self.window.snapshot(now)
        new = self._collect()
        is_requested, forced, inference_ns = self._maybe_request(now, snapshot)
        if is_requested:
            new += self._collect()
        action, source, index, reason = self._choose(now, forced)
        is_fallback = source is None
        if is_fallback:
            self.health.count("fallbacks")
        else:
            self.health.record_latency("plan_age", max(0, now - source.stamp_ns))
            self.newest.started.add(index)  # type: ignore[union-attr]
        self.last_gripper = float(action[-1])
        tick_ns, events = self._end_tick(now, start, inference_ns)
        output = RobotTick(
            now,
            action,
            is_fallback,
            reason,
            source,
            index,
            tuple(new),
            is_requested,
            tick_ns,
            snapshot,
            events,
        )
        self.last_output = output
        return output

    def _choose(
        self, now: int, forced: str | None
    ) -> tuple[np.ndarray, ActionPlan | None, int, str]:
        hold = np.zeros(self.action_dim)
        hold[-1] = self.last_gripper
        if forced is not None:
            return hold, None, -1, forced
        if self.newest is None:
            return hold, None, -1, "no action chunk yet"
        plan = self.newest.plan
        index = self.step_of(plan, now)
        if now - plan.stamp_ns > seconds_to_ns(self.config.control.max_plan_age_s):
            return hold, None, -1, "newest chunk older than control.max_plan_age_s"
        if index >= len(plan.actions):
            return hold, None, -1, f"newest chunk exhausted (step {index} of {len(plan.actions)})"
        action = np.asarray(plan.actions[max(index, 0)], dtype=np.float64)
        if self.robot.temporal_ensemble > 0:
            action = self._ensemble(now, action)
        return action, plan, max(index, 0), ""

    def _ensemble(self, now: int, newest: np.ndarray) -> np.ndarray:
        """ACT's temporal ensembling: the weighted mean of what every recent chunk (within
        `max_plan_age_s`) says for now, weight exp(-m·i), i = 0 the oldest covering chunk.
        The newest chunk always covers now (the caller checked), so the mean is defined."""
        max_age = seconds_to_ns(self.config.control.max_plan_age_s)
        actions = []
        for plan in self.recent:
            step = self.step_of(plan, now)
            if 0 <= step < len(plan.actions) and now - plan.stamp_ns <= max_age:
                actions.append(np.asarray(plan.actions[step], dtype=np.float64))
        if len(actions) <= 1:
            return newest
        weights = np.exp(-self.robot.temporal_ensemble * np.arange(len(actions)))
        return np.einsum("i,id->d", weights / weights.sum(), np.stack(actions))

    def _collect(self) -> list[ActionPlan]:
        accepted = []
        for result in self.worker.poll(self.clock.now_ns()):
            plan = self._accept(result)
            if plan is not None:
                accepted.append(plan)
        return accepted

    def _accept(self, result: InferenceResult) -> ActionPlan | None:
        if result.request.epoch != self.epoch:
            self.health.count("discarded_results")
            return None
        self.health.record_latency("inference", result.latency_ns)
        self.health.record_latency("inference_cpu", result.cpu_ns)
        if result.error_kind == "invalid_plan":
            self.health.count("invalid_plans")
            self.last_problem["plan"] = str(result.error)
            self._events.append(f"invalid chunk: {result.error}")
            return None
        if result.plan is None:
            self.health.count("planner_errors")
            self.last_problem["planner"] = result.error or "no chunk"
            self._events.append(f"planner error: {result.error}")
            return None
        plan: ActionPlan = result.plan  # type: ignore[assignment]
        if self.newest is not None and plan.stamp_ns <= self.newest.plan.stamp_ns:
            self.health.count("discarded_results")
            return None
        self.newest = _Chunk(plan, result.latency_ns)
        self.recent.append(plan)
        self.health.count("plans")
        return plan

    def _needs_chunk(self, now: int) -> bool:
        if self.newest is None:
            return True
        index = self.step_of(self.newest.plan, now)
        return index >= self.robot.replan_steps or index >= len(self.newest.plan.actions)

    def _maybe_request(self, now: int, snapshot: WindowSnapshot) -> tuple[bool, str | None, int]:
        joints = self.joints
        if joints is None:
            return False, None, 0
        if now - joints.stamp_ns > seconds_to_ns(self.robot.max_joint_state_age_s):
            return False, f"joint state {(now - joints.stamp_ns) / 1e9:.3f} s old", 0
        if not self._needs_chunk(now):
            return False, None, 0
        policy = self.config.frame_window.stale_camera_policy
        is_degraded = False
        if not snapshot.is_complete:
            bad = ", ".join(snapshot.bad_cameras)
            if policy == "fallback":
                return False, f"cameras stale or missing: {bad} (policy fallback)", 0
            if policy == "wait" or snapshot.stamp_ns is None:
                self.health.count("waits")
                return False, None, 0
            is_degraded = True
        if snapshot.stamp_ns is None or not self.worker.is_idle:
            return False, None, 0
        if not self.instruction:
            self.health.count("waits")
            self.last_problem["instruction"] = "no instruction yet"
            return False, None, 0
        frames = snapshot.degrade_frames() if is_degraded else snapshot.complete_frames()
        observation = RobotObservation(joints.stamp_ns, frames, joints.positions, self.instruction)
        self.health.count("requests")
        if is_degraded:
            self.health.count("degraded_requests")
        start = self.stopwatch()
        degraded = snapshot.bad_cameras if is_degraded else ()
        self.worker.submit(InferenceRequest(observation, now, self.epoch, is_degraded, degraded))  # type: ignore[arg-type]
        return True, None, self.stopwatch() - start

    # ---------------------------------------------------------------- reporting

    def diagnostics(self) -> list[DiagnosticStatusData]:
        """`blockplan: control loop`, one status per camera, `blockplan: joint states`,
        `blockplan: inputs` — the vehicle's layout with joint states for odometry."""
        counts = self.health.counts()
        latency = self.health.latencies_ms()
        last = self.last_output
        level, message = OK, "publishing action chunks"
        if last is None:
            level, message = WARN, "no tick yet"
        elif last.is_fallback:
            level, message = WARN, f"holding position: {last.reason}"
        if last is not None and any(e.startswith("planner error") for e in last.events):
            level, message = ERROR, self.last_problem.get("planner", "planner error")
        names = (
            "ticks",
            "plans",
            "requests",
            "fallbacks",
            "deadline_misses",
            "planner_errors",
            "invalid_plans",
            "time_jumps",
        )
        values: dict[str, object] = {n: counts.get(n, 0) for n in names}
        for which in ("inference", "tick", "plan_age"):
            for stat in ("p50", "p99"):
                value = latency[which][stat]
                values[f"{which}_{stat}_ms"] = "n/a" if value is None else value
        values["instruction"] = self.instruction or "n/a"
        statuses = [DiagnosticStatusData("blockplan: control loop", level, message, values=values)]
        levels = {CameraState.OK: OK, CameraState.STALE: WARN, CameraState.MISSING: ERROR}
        if last is not None:
            for cam in last.snapshot.cameras:
                age = "n/a" if cam.age_s is None else round(cam.age_s, 3)
                statuses.append(
                    DiagnosticStatusData(
                        f"blockplan: camera {cam.camera}",
                        levels[cam.state],
                        cam.state.value,
                        hardware_id=cam.camera,
                        values={"frame_age_s": age, "buffered": self.window.buffered(cam.camera)},
                    )
                )
        now = last.now_ns if last is not None else self.clock.now_ns()
        joints = self.joints
        if joints is None:
            level, message, age = ERROR, "no joint state", "n/a"
        else:
            age_s = (now - joints.stamp_ns) / 1e9
            age = round(age_s, 3)
            stale = age_s > self.robot.max_joint_state_age_s
            level, message = (WARN, f"joint state {age_s:.3f} s old") if stale else (OK, "fresh")
        statuses.append(
            DiagnosticStatusData("blockplan: joint states", level, message, values={"age_s": age})
        )
        inputs = {
            k: v
            for k, v in counts.items()
            if k.startswith(("invalid_", "unknown_", "out_of_order"))
        }
        inputs["invalid_inputs"] = counts["invalid_inputs"]
        inputs.pop("invalid_plans", None)
        level = WARN if counts["invalid_inputs"] > self._num_invalid_reported else OK
        self._num_invalid_reported = counts["invalid_inputs"]
        message = "; ".join(f"{k}: {v}" for k, v in sorted(self.last_problem.items())) or "ok"
        statuses.append(DiagnosticStatusData("blockplan: inputs", level, message, values=inputs))
        return statuses

    def metrics(self) -> dict:
        counts = self.health.counts()
        latencies = self.health.latencies_ms()
        return {
            **counts,
            "latency_ms": latencies["inference"],
            "tick_ms": latencies["tick"],
            "plan_age_ms": latencies["plan_age"],
        }
