"""Synthetic observations: the same plausible inputs for benchmarks and warm-up."""

from __future__ import annotations

import numpy as np

from blockplan.config import PlannerConfig
from blockplan.types import NS_PER_S, CameraFrame, EgoState, Observation


def synthetic_observation(
    config: PlannerConfig, seed: int, size: tuple[int, int] = (90, 160)
) -> Observation:
    """Random camera images of `size` (H, W) — sky above a horizon, ground below, noise —
    for every configured camera and frame (view-major), and a straight constant-speed ego
    history ending at the observation stamp."""
    rng = np.random.default_rng(seed)
    H, W = size
    rows = np.linspace(0, 1, H)[:, None, None]
    frames = []
    for _ in config.camera_names:
        base = rng.uniform(40, 200, 3)
        for t in range(config.frame_window.num_frames):
            sky = (rows < 0.45) * rng.uniform(120, 230, 3)
            ground = (rows >= 0.45) * base
            noise = rng.normal(0, 12 + 2 * t, (H, W, 3))
            image = np.clip(sky + ground + noise, 0, 255).astype(np.uint8)
            frames.append(image)
    names = [n for n in config.camera_names for _ in range(config.frame_window.num_frames)]
    stamp = 100 * NS_PER_S
    speed = float(rng.uniform(2.0, 15.0))
    ego = tuple(
        EgoState(stamp - int((3.0 - 0.5 * i) * NS_PER_S), speed * 0.5 * i, 0.0, 0.0, speed)
        for i in range(7)
    )
    cams = tuple(CameraFrame(n, stamp, im) for n, im in zip(names, frames, strict=True))
    return Observation(stamp, cams, ego)
