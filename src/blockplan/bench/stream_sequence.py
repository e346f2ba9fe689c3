"""A synthetic frame stream: consecutive observations that each add one new frame per camera.

Tick i holds, for every camera, the frames at stamps (i + t)·period for t = 0 … T−1
(view-major), each image a deterministic function of (camera, stamp) — a frame keeps its
pixels while it slides through the window, as on a real vehicle — and a straight ego
history ending at the tick's stamp. Used by the streaming tests and `bench --streaming`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockplan.config import PlannerConfig
from blockplan.planner.synthetic import straight_history
from blockplan.schema import DrivingSchema
from blockplan.types import NS_PER_S, CameraFrame, Observation


def frame_image(camera_index: int, frame_number: int, size: tuple[int, int]) -> np.ndarray:
    """(H, W, 3) uint8: sky over ground with a moving bright block and noise."""
    rng = np.random.default_rng([camera_index, frame_number])
    H, W = size
    rows = np.linspace(0, 1, H)[:, None, None]
    sky = (rows < 0.45) * np.array([150.0, 180.0, 220.0])
    ground = (rows >= 0.45) * np.array([60.0 + 30 * camera_index, 70.0, 60.0])
    image = sky + ground + rng.normal(0, 15, (H, W, 3))
    x = (5 * frame_number + 17 * camera_index) % max(1, W - W // 5)
    image[H // 2 : H // 2 + H // 6, x : x + W // 5] = 240.0
    return np.clip(image, 0, 255).astype(np.uint8)


def stream_observation(
    config: PlannerConfig,
    tick: int,
    size: tuple[int, int] = (36, 64),
    speed: float = 8.0,
    schema: DrivingSchema | None = None,
) -> Observation:
    """The observation of tick `tick` (>= 0) of the stream (see the module)."""
    T = config.frame_window.num_frames
    return window_observation(config, [list(range(tick, tick + T))], size, speed, schema)


def window_observation(
    config: PlannerConfig,
    numbers: Sequence[Sequence[int]],
    size: tuple[int, int] = (36, 64),
    speed: float = 8.0,
    schema: DrivingSchema | None = None,
) -> Observation:
    """An observation whose camera k holds the stream's frames `numbers[k]` (T frame numbers,
    oldest first; one list for every camera when only one is given): windows that share any
    frames with earlier ones, at any slots. Stamped at the newest frame; the ego history is
    `straight_history` of `schema`."""
    T = config.frame_window.num_frames
    cameras = config.camera_names
    rows = list(numbers) * len(cameras) if len(numbers) == 1 else list(numbers)
    if len(rows) != len(cameras) or any(len(r) != T for r in rows):
        raise ValueError(f"numbers={numbers}: {len(cameras)} cameras x {T} frames needed")
    period_ns = int(config.frame_window.frame_period_s * NS_PER_S)
    base = 10 * NS_PER_S
    frames = [
        CameraFrame(camera, base + n * period_ns, frame_image(k, n, size))
        for k, camera in enumerate(cameras)
        for n in rows[k]
    ]
    last = max(max(r) for r in rows)
    stamp = base + last * period_ns
    v = float(speed + 0.5 * np.sin(0.3 * (last - T + 1)))
    return Observation(stamp, tuple(frames), straight_history(stamp, v, schema))
