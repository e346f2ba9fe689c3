"""Fixtures: a tiny recipe and a synthetic `blockplan dataset` folder (no simulator)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockplan.schema import default_schema, ego_history_array
from blockplan.train.recipe import Recipe
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    ROUTE_AHEAD_M,
    EgoState,
    Lateral,
    Longitudinal,
)

CAMERAS = ("front", "rear")
NUM_FRAMES = 2


@pytest.fixture(scope="session")
def recipe() -> Recipe:
    return Recipe.build("test", CAMERAS, NUM_FRAMES)


def write_shard(
    path: Path, seed: int, num_samples: int = 4, cameras: tuple[str, ...] = CAMERAS
) -> None:
    """A shard with the arrays `blockplan dataset` writes, filled with a constant-speed ego."""
    rng = np.random.default_rng(seed)
    schema = default_schema()
    speed = 10.0 + seed
    cols: dict[str, list] = {}
    for i in range(num_samples):
        t0 = 3.0 + 0.5 * i
        hist = [
            EgoState(
                stamp_ns=int((t0 - 0.5 * k) * 1e9),
                x=speed * (t0 - 0.5 * k),
                y=0.0,
                yaw=0.0,
                v_x=speed,
            )
            for k in range(6, -1, -1)
        ]
        future_t = 0.25 * np.arange(1, 21)
        future = np.stack([speed * future_t, np.zeros(20)], -1)
        row = {
            "images": rng.integers(0, 255, (len(cameras), NUM_FRAMES, 24, 32, 3), dtype=np.uint8),
            "frame_stamps_ns": [int((t0 - 0.5) * 1e9), int(t0 * 1e9)],
            "stamp_ns": int(t0 * 1e9),
            "ego_history": ego_history_array(hist, int(t0 * 1e9), schema),
            "history_states": [
                [s.stamp_ns / 1e9, s.x, s.y, s.yaw, s.v_x, s.v_y, s.a_x, s.a_y] for s in hist
            ],
            "waypoints": future[3::4],
            "future_xy": future,
            "critical": [k == "nearby_vehicle" for k in CRITICAL_OBJECT_KEYS],
            "longitudinal": list(Longitudinal).index(Longitudinal.KEEP),
            "lateral": list(Lateral).index(Lateral.LANE_FOLLOW),
            "explanation": "Keep the lane at a steady speed.",
            "route_command": "lane_follow",
            "lane_pose": [0.1 * seed - 0.05 * i, 0.01 * i],
            # no car ahead in the lane (inf) in the first sample, then one closing in
            "lead": [np.inf, np.nan] if i == 0 else [60.0 - 10.0 * i + seed, speed - 2.0],
            # lanes to the left and right; a car ahead on the left, one behind on the right
            "lanes_beside": [float(i % 3), float(2 - i % 3)],
            "beside": [
                [5.0 + 3.0 * i, speed + 1.0, np.inf, np.nan],
                [np.inf, np.nan, 8.0 + seed, speed - 1.0],
            ],
            # the route ahead bends left more with every sample
            "route_ahead": [[d, 0.002 * i * d * d] for d in ROUTE_AHEAD_M],
        }
        for k, v in row.items():
            cols.setdefault(k, []).append(v)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays["critical"] = arrays["critical"].astype(bool)
    arrays["longitudinal"] = arrays["longitudinal"].astype(np.uint8)
    arrays["lateral"] = arrays["lateral"].astype(np.uint8)
    arrays["camera_names"] = np.asarray(cameras)
    arrays["scenario"] = np.asarray("highway")
    arrays["seed"] = np.asarray(seed)
    np.savez_compressed(path, **arrays)


def write_dataset(
    root: Path,
    splits: dict[str, list[int]],
    num_samples: int = 4,
    cameras: tuple[str, ...] = CAMERAS,
) -> Path:
    episodes = []
    for split, seeds in splits.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            shard = root / split / f"highway-{seed:06d}.npz"
            write_shard(shard, seed, num_samples, cameras)
            episodes.append(
                {
                    "scenario": "highway",
                    "seed": seed,
                    "split": split,
                    "shard": str(shard.relative_to(root)),
                    "num_samples": num_samples,
                }
            )
    (root / "manifest.json").write_text(json.dumps({"episodes": episodes, "dropped": []}))
    return root


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dataset")
    return write_dataset(root, {"train": [0, 1, 2], "val": [3], "test": [4]})
