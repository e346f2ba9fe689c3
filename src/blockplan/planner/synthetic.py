"""Synthetic observations: the same plausible inputs for benchmarks and warm-up."""

from __future__ import annotations

import numpy as np

from blockplan.config import PlannerConfig
from blockplan.schema import DrivingSchema
from blockplan.schema.action import ActionSchema
from blockplan.types import (
    NS_PER_S,
    CameraFrame,
    EgoState,
    Observation,
    RobotObservation,
    seconds_to_ns,
)


def straight_history(
    stamp_ns: int, speed: float, schema: DrivingSchema | None = None
) -> tuple[EgoState, ...]:
    """The ego driving straight along x at `speed`: one state per prompt history row of
    `schema` (default: `DrivingSchema()`), `history_period_s` apart, the last at `stamp_ns`."""
    schema = schema or DrivingSchema()
    n, period = schema.num_history, schema.history_period_s
    return tuple(
        EgoState(
            stamp_ns - seconds_to_ns(period * (n - 1 - i)), speed * period * i, 0.0, 0.0, speed
        )
        for i in range(n)
    )


def synthetic_observation(
    config: PlannerConfig,
    seed: int,
    size: tuple[int, int] = (90, 160),
    schema: DrivingSchema | None = None,
) -> Observation:
    """Random camera images of `size` (H, W) — sky above a horizon, ground below, noise —
    for every configured camera and frame (view-major), and a straight constant-speed ego
    history ending at the observation stamp (`straight_history` of `schema`)."""
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
    cams = tuple(CameraFrame(n, stamp, im) for n, im in zip(names, frames, strict=True))
    return Observation(stamp, cams, straight_history(stamp, speed, schema))


SYNTHETIC_INSTRUCTIONS = (
    "pick up the red block and place it in the tray",
    "open the top drawer",
    "push the button",
    "put the cup on the plate",
)


def synthetic_robot_observation(
    config: PlannerConfig,
    seed: int,
    schema: ActionSchema | None = None,
    size: tuple[int, int] = (64, 64),
) -> RobotObservation:
    """Random camera images of `size` (H, W) — a table below a wall, a random box, noise —
    for every configured camera and frame (view-major), a proprioceptive state uniform in the
    schema's ranges and one of a few instructions."""
    schema = schema or ActionSchema()
    rng = np.random.default_rng(seed)
    H, W = size
    rows = np.linspace(0, 1, H)[:, None, None]
    stamp = 100 * NS_PER_S
    frames = []
    for name in config.camera_names:
        base = rng.uniform(40, 200, 3)
        for t in range(config.frame_window.num_frames):
            image = (rows < 0.4) * rng.uniform(150, 230, 3) + (rows >= 0.4) * base
            image = image + rng.normal(0, 10 + 2 * t, (H, W, 3))
            y, x = rng.integers(0, H // 2), rng.integers(0, W // 2)
            image[y : y + H // 4, x : x + W // 4] = rng.uniform(0, 255, 3)
            frames.append(CameraFrame(name, stamp, np.clip(image, 0, 255).astype(np.uint8)))
    low, high = np.asarray(schema.proprio_low), np.asarray(schema.proprio_high)
    proprio = rng.uniform(low, high) if schema.proprio_dim else np.zeros(0)
    instruction = SYNTHETIC_INSTRUCTIONS[int(rng.integers(len(SYNTHETIC_INSTRUCTIONS)))]
    return RobotObservation(stamp, tuple(frames), proprio, instruction)


def synthetic_input(
    config: PlannerConfig, seed: int, schema: DrivingSchema | ActionSchema | None = None
) -> Observation | RobotObservation:
    """`synthetic_observation` for a driving schema, `synthetic_robot_observation` for an
    action schema: what a planner of that schema takes."""
    if isinstance(schema, ActionSchema):
        return synthetic_robot_observation(config, seed, schema)
    return synthetic_observation(config, seed, schema=schema)
