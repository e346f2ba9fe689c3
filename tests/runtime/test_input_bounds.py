"""What the runtime accepts is bounded (RuntimeLimits): an image beyond `max_image_pixels`
is refused before it is stored and /diagnostics names it; a camera flooding at 1 kHz has
its frames beyond `max_camera_rate_hz` dropped and counted, while the window's buffers and
the memory stay bounded and every tick still publishes. No ROS: the node asks the same
`admits_frame` before it decodes a message."""

from __future__ import annotations

import io
import tracemalloc
from types import SimpleNamespace

import numpy as np
from PIL import Image

from blockplan.bags import image_msg_size
from blockplan.config import PlannerConfig
from blockplan.runtime import (
    ConstantVelocityPlanner,
    PlannerRuntime,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.runtime.diagnostics import diagnostic_statuses
from blockplan.runtime.limits import RuntimeLimits
from blockplan.types import CameraFrame, EgoState

MS = 1_000_000  # ns


def _runtime(limits: RuntimeLimits | None = None) -> tuple[PlannerRuntime, VirtualClock]:
    config = PlannerConfig()
    clock = VirtualClock(10**9)
    worker = VirtualWorker(ConstantVelocityPlanner(), "ideal", plan_postprocess(config))
    return PlannerRuntime(config, worker, clock, limits), clock


def _inputs_status(runtime: PlannerRuntime):
    """The inputs status against an empty previous snapshot (every count is new)."""
    return next(s for s in diagnostic_statuses(runtime, {}) if s.name == "blockplan: inputs")


def test_an_oversized_image_is_refused_unstored_and_diagnostics_name_it():
    runtime, clock = _runtime()
    limit = runtime.limits.max_image_pixels
    # an 8K x 8K frame without its 200 MB: a read-only broadcast view
    huge = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (8192, 8192, 3))
    assert huge.shape[0] * huge.shape[1] > limit
    camera = runtime.config.camera_names[0]
    assert runtime.on_frame(CameraFrame(camera, clock.now_ns(), huge)) is None
    assert runtime.window.buffered(camera) == 0
    assert runtime.health.input_counts()["oversized_image"] == 1
    status = _inputs_status(runtime)
    assert status.level == 1  # WARN
    assert "oversized_image" in status.message and "8192x8192" in status.message
    # a frame of the rig's size is taken as before
    ok = np.zeros((96, 160, 3), np.uint8)
    assert runtime.on_frame(CameraFrame(camera, clock.now_ns(), ok)) is not None
    assert runtime.window.buffered(camera) == 1


def test_the_size_bound_is_the_runtime_limit():
    runtime, clock = _runtime(RuntimeLimits(max_image_pixels=160 * 96))
    camera = runtime.config.camera_names[0]
    assert runtime.admits_frame(camera, clock.now_ns(), 96, 160)
    assert not runtime.admits_frame(camera, clock.now_ns(), 97, 160)
    assert runtime.health.input_counts()["oversized_image"] == 1


def test_a_1khz_camera_flood_is_rate_limited_and_memory_and_queues_stay_bounded():
    runtime, clock = _runtime()
    cameras = runtime.config.camera_names
    max_frames = max(
        2, runtime.limits.frames_per_window_frame * runtime.config.frame_window.num_frames
    )
    seconds, rate_hz = 4, 1000
    per_frame = 48 * 80 * 3  # bytes of each (distinct) image
    outputs, buffered, peaks = [], [], []
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for ms in range(seconds * rate_hz):
            now = clock.now_ns()
            for camera in cameras:
                runtime.on_frame(CameraFrame(camera, now, np.zeros((48, 80, 3), np.uint8)))
            if ms % 100 == 0:  # odometry and a control tick at 10 Hz
                runtime.on_odometry(EgoState(now, 0.005 * ms, 0.0, 0.0, 5.0))
                out = runtime.tick()  # kept as flags: the outputs would hold memory here
                outputs.append((out.trajectory is not None, out.is_fallback))
                buffered.append(max(runtime.window.buffered(c) for c in cameras))
                peaks.append(tracemalloc.get_traced_memory()[0] - baseline)
            clock.advance(MS)
    finally:
        tracemalloc.stop()
    pushed = seconds * rate_hz * len(cameras)
    counts = runtime.health.input_counts()
    # 1 kHz against the 200 Hz bound: four frames in five are dropped before they are stored
    kept_per_camera = seconds * runtime.limits.max_camera_rate_hz
    assert counts["rate_limited_frames"] == pushed - len(cameras) * kept_per_camera
    assert max(buffered) <= max_frames  # the window's buffers hold a bounded count
    # memory: the frames the buffers hold and bookkeeping, far from the flood's ~180 MB,
    # and no growth from the first half of the flood to the second
    flood = pushed * per_frame
    assert max(peaks) < min(32 << 20, flood // 5)
    assert max(peaks[len(peaks) // 2 :]) <= 1.1 * max(peaks[: len(peaks) // 2]) + (1 << 20)
    assert all(published for published, _ in outputs)  # every tick publishes
    assert sum(not fallback for _, fallback in outputs) >= len(outputs) - 2
    status = _inputs_status(runtime)
    assert status.values["rate_limited_frames"] == counts["rate_limited_frames"]
    assert "faster than 200 Hz" in status.message


def test_a_rate_limited_frame_is_refused_before_it_is_decoded():
    runtime, clock = _runtime()
    camera = runtime.config.camera_names[0]
    now = clock.now_ns()
    runtime.on_frame(CameraFrame(camera, now, np.zeros((4, 4, 3), np.uint8)))
    assert not runtime.admits_frame(camera, now + 1 * MS, 4, 4)  # 1 kHz
    assert runtime.admits_frame(camera, now + 50 * MS, 4, 4)  # 20 Hz
    assert runtime.health.input_counts()["rate_limited_frames"] == 1


def test_image_msg_size_reads_the_size_without_decoding():
    raw = SimpleNamespace(height=3072, width=4096, encoding="rgb8", step=4096 * 3, data=b"")
    assert image_msg_size(raw) == (3072, 4096)
    png = io.BytesIO()
    Image.new("RGB", (640, 480)).save(png, format="PNG")
    compressed = SimpleNamespace(format="png", data=png.getvalue())
    assert image_msg_size(compressed) == (480, 640)
