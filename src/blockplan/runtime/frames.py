"""Per-camera ring buffers and the K cameras × T frames window snapshot (docs/DESIGN.md §5).

Each camera keeps a bounded, time-ordered buffer of its newest frames. A snapshot at `now`
picks for every camera its newest frame (fresh when at most `max_frame_age_s` old) and the
frames nearest to newest − k·`frame_period_s` for k = T−1 … 1, in view-major order (camera 0
oldest→newest, then camera 1, …). Before a buffer spans the whole window the oldest frame
stands in for the missing ones (`is_padded`).

With `reuse_tolerance` > 0 (RUNTIME.md "Windows that share frames"), an older slot takes,
among the frames within that fraction of a period of its target, the one nearest the target that an
earlier request used (`mark_used`), so consecutive requests share frames and the streaming
prefill reuses their K/V; with 0 the choice is the plain nearest frame. `spacing_error_ns`
reports how far a window's frames are from the trained spacing.

A camera that is stale or missing is reported; `degrade_frames` fills its slots with black
frames so the planner still sees K × T images. Which of wait / degrade / fallback applies
is the control loop's decision.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

import numpy as np

from blockplan.config import FrameWindowConfig
from blockplan.types import CameraFrame, ns_to_seconds, seconds_to_ns


class PushResult(str, enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # same stamp as the newest frame: dropped
    OUT_OF_ORDER = "out_of_order"  # older than the newest frame: dropped
    TIME_JUMP = "time_jump"  # far older than the newest frame: the caller resets


class CameraRingBuffer:
    """Frames of one camera, oldest→newest, bounded in count and time span."""

    def __init__(self, camera: str, span_ns: int, max_frames: int, time_jump_ns: int) -> None:
        if max_frames < 2:
            raise ValueError(f"CameraRingBuffer {camera!r}: max_frames={max_frames} must be >= 2")
        self.camera = camera
        self.span_ns = span_ns
        self.max_frames = max_frames
        self.time_jump_ns = time_jump_ns
        self._frames: list[CameraFrame] = []

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def frames(self) -> tuple[CameraFrame, ...]:
        return tuple(self._frames)

    @property
    def newest(self) -> CameraFrame | None:
        return self._frames[-1] if self._frames else None

    def clear(self) -> None:
        self._frames.clear()

    def newest_stamp_ns(self) -> int | None:
        return self._frames[-1].stamp_ns if self._frames else None

    def push(self, frame: CameraFrame) -> PushResult:
        newest = self.newest
        if newest is not None:
            if frame.stamp_ns < newest.stamp_ns - self.time_jump_ns:
                return PushResult.TIME_JUMP
            if frame.stamp_ns == newest.stamp_ns:
                return PushResult.DUPLICATE
            if frame.stamp_ns < newest.stamp_ns:
                return PushResult.OUT_OF_ORDER
        self._frames.append(frame)
        cutoff = frame.stamp_ns - self.span_ns
        while len(self._frames) > 1 and self._frames[0].stamp_ns < cutoff:
            self._frames.pop(0)
        if len(self._frames) > self.max_frames:
            self._thin()
        return PushResult.ACCEPTED

    def _thin(self) -> None:
        """Drop the inner frame whose neighbours are closest together: the buffer keeps its
        span with evenly spread frames whatever the camera rate."""
        stamps = np.array([f.stamp_ns for f in self._frames], dtype=np.int64)
        gaps = stamps[2:] - stamps[:-2]  # (n-2,) span left if frame i+1 were dropped
        # The newest frame (last) and the oldest (first) are never dropped.
        self._frames.pop(int(np.argmin(gaps)) + 1)

    def nearest(
        self, stamp_ns: int, used: set[int] | frozenset[int] = frozenset(), tolerance_ns: int = 0
    ) -> CameraFrame:
        """The frame nearest `stamp_ns`; a frame whose stamp is in `used` wins when it lies
        within `tolerance_ns` of it (the nearest such one)."""
        if used:
            reusable = [
                f
                for f in self._frames
                if f.stamp_ns in used and abs(f.stamp_ns - stamp_ns) <= tolerance_ns
            ]
            if reusable:
                return min(reusable, key=lambda f: abs(f.stamp_ns - stamp_ns))
        return min(self._frames, key=lambda f: abs(f.stamp_ns - stamp_ns))


class CameraState(str, enum.Enum):
    OK = "ok"
    STALE = "stale"
    MISSING = "missing"


@dataclass(frozen=True)
class CameraStatus:
    camera: str
    state: CameraState
    age_s: float | None  # age of the newest frame at the snapshot time (None: never seen)
    is_padded: bool = False


@dataclass(frozen=True)
class WindowSnapshot:
    """The window at `now_ns`. frames: K×T view-major, a camera's slots empty (None) when it is
    stale or missing. stamp_ns: t0, the newest fresh frame's stamp (None if none is fresh)."""

    now_ns: int
    stamp_ns: int | None
    cameras: tuple[CameraStatus, ...]
    frames: tuple[tuple[CameraFrame, ...] | None, ...]

    @property
    def is_complete(self) -> bool:
        return all(c.state == CameraState.OK for c in self.cameras)

    @property
    def num_fresh(self) -> int:
        return sum(c.state == CameraState.OK for c in self.cameras)

    @property
    def is_padded(self) -> bool:
        return any(c.is_padded for c in self.cameras)

    def spacing_error_ns(self, period_ns: int) -> int:
        """The largest |newest − stamp − k·period| over the fresh cameras' older frames (k
        slots before the newest): how far the window is from the trained spacing."""
        worst = 0
        for per_camera in self.frames:
            if per_camera is None:
                continue
            newest = per_camera[-1].stamp_ns
            for k, frame in enumerate(reversed(per_camera)):
                worst = max(worst, abs(newest - frame.stamp_ns - k * period_ns))
        return worst

    @property
    def bad_cameras(self) -> tuple[str, ...]:
        return tuple(c.camera for c in self.cameras if c.state != CameraState.OK)

    def complete_frames(self) -> tuple[CameraFrame, ...]:
        """All K×T frames; only valid when every camera is fresh."""
        if not self.is_complete:
            raise ValueError(f"window incomplete: cameras {self.bad_cameras} are stale/missing")
        return tuple(f for per_camera in self.frames for f in per_camera)  # type: ignore[union-attr]

    def degrade_frames(self) -> tuple[CameraFrame, ...]:
        """K×T frames with black images in the slots of stale / missing cameras (same size and
        stamps as the first fresh camera's frames)."""
        reference = next((fs for fs in self.frames if fs is not None), None)
        if reference is None:
            raise ValueError("window has no fresh camera to degrade from")
        out: list[CameraFrame] = []
        for status, per_camera in zip(self.cameras, self.frames, strict=True):
            if per_camera is not None:
                out.extend(per_camera)
                continue
            black = np.zeros_like(reference[0].image)
            out.extend(CameraFrame(status.camera, f.stamp_ns, black) for f in reference)
        return tuple(out)


class FrameWindow:
    """The ring buffers of every camera (thread-safe: callbacks push, the loop snapshots)."""

    def __init__(
        self,
        cameras: tuple[str, ...],
        config: FrameWindowConfig,
        time_jump_s: float = 1.0,
        frames_per_window_frame: int = 8,
    ) -> None:
        self.cameras = tuple(cameras)
        self.config = config
        period_ns = seconds_to_ns(config.frame_period_s)
        self.period_ns = period_ns
        self.max_age_ns = seconds_to_ns(config.max_frame_age_s)
        # Enough history to pick the oldest window frame even when the newest is at the age
        # limit, plus one period of slack for the nearest-frame choice.
        span_ns = (config.num_frames - 1) * period_ns + self.max_age_ns + period_ns
        max_frames = max(2, frames_per_window_frame * config.num_frames)
        jump_ns = seconds_to_ns(time_jump_s)
        self._buffers = {c: CameraRingBuffer(c, span_ns, max_frames, jump_ns) for c in self.cameras}
        self.tolerance_ns = int(config.reuse_tolerance * period_ns)
        self._used: dict[str, set[int]] = {c: set() for c in self.cameras}  # stamps
        self._lock = threading.Lock()

    def push(self, frame: CameraFrame) -> PushResult:
        if frame.camera not in self._buffers:
            raise KeyError(f"frame from unknown camera {frame.camera!r} (known: {self.cameras})")
        with self._lock:
            return self._buffers[frame.camera].push(frame)

    def clear(self) -> None:
        with self._lock:
            for buf in self._buffers.values():
                buf.clear()
            for used in self._used.values():
                used.clear()

    def mark_used(self, frames: tuple[CameraFrame, ...]) -> tuple[int, int]:
        """Remember the frames a request used (their stamps, per camera; forgotten once their
        camera's buffer no longer holds them). Returns (frames an earlier request had used
        too, frames not used before)."""
        shared = new = 0
        with self._lock:
            stamps = [(f.camera, f.stamp_ns) for f in frames if f.camera in self._used]
            for camera, stamp in stamps:
                if stamp in self._used[camera]:
                    shared += 1
                else:
                    new += 1
            for camera, stamp in stamps:
                self._used[camera].add(stamp)
            for camera, used in self._used.items():
                held = {f.stamp_ns for f in self._buffers[camera].frames}
                used.intersection_update(held)
        return shared, new

    def frames_by_stamp(
        self, frames: tuple[tuple[str, tuple[int, ...]], ...], black: tuple[str, ...] = ()
    ) -> tuple[CameraFrame, ...] | None:
        """The buffered frames with these stamps per camera, in the given (view) order; the
        cameras in `black` get black frames of the first other camera's size. None when a
        frame is not buffered (any more). Replay rebuilds a live window with this."""
        with self._lock:
            held = {c: {f.stamp_ns: f for f in buf.frames} for c, buf in self._buffers.items()}
        picked: dict[str, list[CameraFrame]] = {}
        for camera, stamps in frames:
            if camera not in held:
                return None
            if camera in black:
                continue
            found = [held[camera].get(s) for s in stamps]
            if any(f is None for f in found):
                return None
            picked[camera] = found  # type: ignore[assignment]
        if not picked:
            return None
        reference = next(iter(picked.values()))[0].image
        out: list[CameraFrame] = []
        for camera, stamps in frames:
            if camera in black:
                out.extend(CameraFrame(camera, s, np.zeros_like(reference)) for s in stamps)
            else:
                out.extend(picked[camera])
        return tuple(out)

    def newest_stamp_ns(self, camera: str) -> int | None:
        """The stamp of `camera`'s newest buffered frame (None: none)."""
        with self._lock:
            return self._buffers[camera].newest_stamp_ns()

    def buffered(self, camera: str) -> int:
        with self._lock:
            return len(self._buffers[camera])

    def snapshot(self, now_ns: int) -> WindowSnapshot:
        statuses: list[CameraStatus] = []
        frames: list[tuple[CameraFrame, ...] | None] = []
        with self._lock:
            for camera in self.cameras:
                buf = self._buffers[camera]
                newest = buf.newest
                if newest is None:
                    statuses.append(CameraStatus(camera, CameraState.MISSING, None))
                    frames.append(None)
                    continue
                age_ns = max(0, now_ns - newest.stamp_ns)
                if age_ns > self.max_age_ns:
                    statuses.append(CameraStatus(camera, CameraState.STALE, ns_to_seconds(age_ns)))
                    frames.append(None)
                    continue
                picked = []
                is_padded = False
                for k in range(self.config.num_frames - 1, 0, -1):
                    target = newest.stamp_ns - k * self.period_ns
                    frame = buf.nearest(target, self._used[camera], self.tolerance_ns)
                    # Farther than half a period from its slot: the buffer does not reach back
                    # that far yet (start-up) and the oldest frame stands in.
                    is_padded |= abs(frame.stamp_ns - target) > self.period_ns // 2
                    picked.append(frame)
                picked.append(newest)
                statuses.append(
                    CameraStatus(camera, CameraState.OK, ns_to_seconds(age_ns), is_padded)
                )
                frames.append(tuple(picked))
        fresh = [fs[-1].stamp_ns for fs in frames if fs is not None]
        return WindowSnapshot(now_ns, max(fresh) if fresh else None, tuple(statuses), tuple(frames))
