"""What the vehicle's and the robot's control loops share (runtime/loop.py, runtime/robot.py).

Both own a frame window fed from any thread, an inference worker, the health counters and a
lock that serialises ticks with resets. `RuntimeCore` holds that state and the steps that do
not depend on the embodiment:

* `on_frame`: an unknown camera is an invalid input; a frame stamped far behind the newest
  one is a time jump (the runtime resets, then takes the frame); duplicates and late frames
  are counted and dropped;
* `on_invalid_input`: counted; the first of a kind is a warning, its repeats debug lines;
* `reset`: the window, the epoch, the tick clock and the subclass's own state
  (`_forget_timeline`) start over;
* `_begin_tick` / `_end_tick`: the tick clock (a clock that jumps back resets; a timer that
  fires late is a deadline miss), the tick count and the tick's own time.
"""

from __future__ import annotations

import logging
import threading

from blockplan.config import PlannerConfig
from blockplan.runtime.clock import Clock, Stopwatch
from blockplan.runtime.frames import FrameWindow, PushResult
from blockplan.runtime.health import Count, Health, InvalidInput
from blockplan.runtime.limits import RuntimeLimits
from blockplan.runtime.worker import InferenceWorker
from blockplan.types import CameraFrame, seconds_to_ns

log = logging.getLogger("blockplan.runtime")

_DROPPED_FRAMES = {
    PushResult.DUPLICATE: Count.DUPLICATE_FRAMES,
    PushResult.OUT_OF_ORDER: Count.OUT_OF_ORDER_FRAMES,
}


class RuntimeCore:
    """Frame window, worker, health, epoch and the tick clock of a control loop."""

    def __init__(
        self,
        config: PlannerConfig,
        worker: InferenceWorker,
        clock: Clock,
        limits: RuntimeLimits | None,
        stopwatch: Stopwatch,
    ) -> None:
        self.config = config
        self.worker = worker
        self.clock = clock
        self.limits = limits or RuntimeLimits()
        self.stopwatch = stopwatch
        self.health = Health(self.limits.latency_window)
        self.window = FrameWindow(
            config.camera_names,
            config.frame_window,
            self.limits.time_jump_s,
            self.limits.frames_per_window_frame,
        )
        self.period_ns = seconds_to_ns(1.0 / config.control.rate_hz)
        self._min_frame_interval_ns = seconds_to_ns(1.0 / self.limits.max_camera_rate_hz)
        self.epoch = 0
        self.last_problem: dict[str, str] = {}
        self.last_time_jump: str | None = None  # why the runtime last reset
        self._last_tick_ns: int | None = None
        self._events: list[str] = []
        self._num_invalid_reported = 0
        # tick() and reset() may run on different executor threads in the live node.
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- inputs (any thread)

    def admits_frame(self, camera: str, stamp_ns: int, height: int, width: int) -> bool:
        """Whether a frame of `camera` at `stamp_ns` of `height` x `width` pixels is to be
        decoded and stored: an image beyond `limits.max_image_pixels` is refused (an invalid
        input naming its size), a frame closer than 1 / `limits.max_camera_rate_hz` after the
        camera's newest is dropped (`rate_limited_frames`, the detail on /diagnostics). The
        node asks before decoding a message, so a flood or a huge image costs no decode."""
        if camera not in self.window.cameras:
            return True  # on_frame reports it
        pixels = int(height) * int(width)
        if pixels > self.limits.max_image_pixels:
            self.on_invalid_input(
                InvalidInput.OVERSIZED_IMAGE,
                f"camera {camera}: {width}x{height} image has {pixels} pixels, more than "
                f"{self.limits.max_image_pixels} (RuntimeLimits.max_image_pixels): refused",
            )
            return False
        newest = self.window.newest_stamp_ns(camera)
        if newest is not None and 0 < stamp_ns - newest < self._min_frame_interval_ns:
            self.health.count(Count.RATE_LIMITED_FRAMES)
            self.last_problem[Count.RATE_LIMITED_FRAMES.value] = (
                f"camera {camera}: frames {(stamp_ns - newest) / 1e6:.3g} ms apart, faster "
                f"than {self.limits.max_camera_rate_hz:g} Hz: dropped"
            )
            return False
        return True

    def on_frame(self, frame: CameraFrame) -> PushResult | None:
        if frame.camera not in self.window.cameras:
            self.on_invalid_input(
                InvalidInput.UNKNOWN_CAMERA, f"frame from camera {frame.camera!r}"
            )
            return None
        height, width = frame.image.shape[:2]
        if not self.admits_frame(frame.camera, frame.stamp_ns, height, width):
            return None
        result = self.window.push(frame)
        if result == PushResult.TIME_JUMP:
            self.reset(f"camera {frame.camera} stamp jumped back to {frame.stamp_ns} ns")
            result = self.window.push(frame)
        elif result in _DROPPED_FRAMES:
            self.health.count(_DROPPED_FRAMES[result])
        return result

    def on_invalid_input(self, kind: InvalidInput | str, detail: str) -> None:
        """An input the adapter could not use (undecodable image, corrupt message…)."""
        kind = InvalidInput(kind)  # ValueError naming an unknown kind
        self.health.count_invalid(kind)
        # The first of each kind is a warning; repeats (a broken camera at 30 Hz) go to debug.
        level = logging.DEBUG if kind.value in self.last_problem else logging.WARNING
        self.last_problem[kind.value] = detail
        log.log(level, "invalid input (%s): %s", kind.value, detail)

    def reset(self, reason: str) -> None:
        """Forget everything tied to the old timeline (time jump)."""
        with self._lock:
            self._reset(reason)

    def _reset(self, reason: str) -> None:
        self.window.clear()
        self._forget_timeline()
        self.epoch += 1
        self._last_tick_ns = None
        self.health.count(Count.TIME_JUMPS)
        self.last_time_jump = reason
        self._events.append(f"time jump: {reason}")
        log.warning("time jump, runtime reset: %s", reason)

    def _forget_timeline(self) -> None:
        """The subclass's own state of the old timeline (ego history, plans, chunks…)."""

    # ---------------------------------------------------------------- the tick

    def _begin_tick(self) -> int:
        """Now on the runtime's clock; a clock far behind the last tick resets the runtime,
        a timer that fired late is a deadline miss."""
        now = self.clock.now_ns()
        if self._last_tick_ns is not None:
            if now < self._last_tick_ns - seconds_to_ns(self.limits.time_jump_s):
                self._reset(f"clock jumped back from {self._last_tick_ns} to {now} ns")
            elif now - self._last_tick_ns > self.period_ns * 3 // 2:
                self.health.count(Count.DEADLINE_MISSES)
        self.health.count(Count.TICKS)
        return now

    def _end_tick(self, now: int, start_ns: int, inference_ns: int) -> tuple[int, tuple[str, ...]]:
        """The tick's own time (without inference run inline by a virtual worker) and the
        events since the last tick."""
        tick_ns = self.stopwatch() - start_ns - inference_ns
        if tick_ns > self.period_ns:
            self.health.count(Count.DEADLINE_MISSES)
        self.health.record_latency("tick", tick_ns)
        self._last_tick_ns = now
        events, self._events = tuple(self._events), []
        return tick_ns, events

    def close(self) -> None:
        self.worker.close()
