"""Scene frames: camera images of many Meta-World layouts, each labelled with the object's,
the goal's and the hand's positions (`blockplan robot-scenes`; docs/SIM.md "Scene frames").

A demonstration costs a whole expert episode for one layout, so a data set of a few hundred
episodes shows a few hundred goal positions, and a vision tower trained on it learns those
layouts by heart instead of reading the goal marker (docs/BENCHMARKS.md "Robots"). A scene
frame costs one reset and a few renders: tens of thousands of layouts fit in the time of a few
hundred demonstrations. They pretrain the tower's scene head (`blockplan train --embodiment
robot --tower-data DIR`) before the policy learns on the demonstrations.

Per seed and task: the reset frame, then `frames_per_seed - 1` more frames, each after a
random number (1…`max_gap`) of steps of the scripted expert with Gaussian noise on its
end-effector deltas, so the hand (and the object an episode moves: the puck, the peg, the
door, drawer, button or window) is seen in the places an episode takes them, not only at the
start. Nothing between two frames is rendered. The labels are `manipulation.scene_of`: for
the articulated tasks the object is the handle (door, drawer, window), the button's top or
the peg's grasp point, and the goal Meta-World's target (docs/SIM.md "Robots").

OUT/manifest.json                          cameras, image size, tasks, seeds, frames per seed
OUT/<task>/seeds_<first>_<last>.npz        one shard per block of `block` seeds: images
                                           (N, K, H, W, 3) uint8 in the manifest's camera
                                           order, scene (N, 9) float32, seed (N,) int64

Generation is resumable (a shard that exists is kept; a shard is written under a temporary
name and moved into place) and can be spread over processes (worker i writes the blocks
i, i + n, …). The seeds start at `SCENE_SEED_BASE`, disjoint from the demonstration splits
(`manipulation.seeds_of`) and the closed-loop seeds (900000…).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockplan.errors import UserError
from blockplan.sim.manipulation import ManipulationEnv, scene_of, task_spec

log = logging.getLogger(__name__)
SCENE_SEED_BASE = 300_000
MANIFEST = "manifest.json"
FORMAT = "blockplan-scene-frames/1"


def shard_path(root: Path, task: str, first: int, last: int) -> Path:
    return root / task / f"seeds_{first:06d}_{last:06d}.npz"


def _blocks(seeds: int, block: int) -> list[tuple[int, int]]:
    """(first, last) seed of every block, inclusive."""
    out = []
    for start in range(0, seeds, block):
        first = SCENE_SEED_BASE + start
        out.append((first, first + min(block, seeds - start) - 1))
    return out


def record_scene_frames(
    out: str | Path,
    tasks: Sequence[str],
    seeds: int,
    frames_per_seed: int = 3,
    image_size: int = 64,
    cameras: tuple[str, ...] = ("front", "wrist"),
    max_gap: int = 40,
    action_noise: float = 0.5,
    block: int = 250,
    worker: int = 0,
    num_workers: int = 1,
) -> dict[str, int]:
    """Write the scene-frame shards of `seeds` layouts per task under OUT (resumable)."""
    if seeds < 1 or frames_per_seed < 1 or max_gap < 1 or block < 1 or action_noise < 0:
        raise UserError("seeds, frames per seed, max gap and block must be >= 1, action noise >= 0")
    if not 0 <= worker < num_workers:
        raise UserError(f"worker {worker}: must be in [0, {num_workers})")
    for t in tasks:
        task_spec(t)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": FORMAT,
        "cameras": list(cameras),
        "image_size": int(image_size),
        "tasks": list(tasks),
        "seeds": int(seeds),
        "seed_base": SCENE_SEED_BASE,
        "frames_per_seed": int(frames_per_seed),
        "max_gap": int(max_gap),
        "action_noise": float(action_noise),
    }
    path = root / MANIFEST
    if path.is_file():
        previous = json.loads(path.read_text())
        fixed = ("format", "cameras", "image_size", "frames_per_seed", "max_gap", "action_noise")
        changed = [k for k in fixed if previous.get(k) != manifest[k]]
        if changed:
            raise UserError(f"{root}: holds scene frames made with other {', '.join(changed)}")
        manifest["tasks"] = sorted(set(previous["tasks"]) | set(tasks))
        manifest["seeds"] = max(int(previous["seeds"]), int(seeds))
    if worker == 0:
        tmp = path.with_name(f"tmp_{os.getpid()}_{MANIFEST}")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, path)
    plan = [(t, b) for b in _blocks(seeds, block) for t in tasks][worker::num_workers]
    envs: dict[str, ManipulationEnv] = {}
    done = kept = 0
    started = time.monotonic()
    for task, (first, last) in plan:
        target = shard_path(root, task, first, last)
        if target.exists():
            kept += 1
            continue
        if task not in envs:
            envs[task] = ManipulationEnv(task, image_size, cameras)
        images, scene, seed_of = [], [], []
        for seed in range(first, last + 1):
            for frame in scene_frames_of(envs[task], seed, frames_per_seed, max_gap, action_noise):
                images.append(np.stack([frame.images[c] for c in cameras]))
                scene.append(frame.scene)
                seed_of.append(seed)
        write_shard(target, np.asarray(images), np.asarray(scene), np.asarray(seed_of))
        done += 1
        rate = (time.monotonic() - started) / done
        log.info(
            "worker %d: %s seeds %d-%d written (%.0f s per shard), %d left",
            worker,
            task,
            first,
            last,
            rate,
            len(plan) - done - kept,
        )
    for env in envs.values():
        env.close()
    return {"written": done, "kept": kept, "planned": len(plan)}


def write_shard(path: Path, images: np.ndarray, scene: np.ndarray, seed: np.ndarray) -> None:
    """One shard, written under a temporary name and moved into place."""
    if not len(images) == len(scene) == len(seed) or images.ndim != 5 or scene.shape[1:] != (9,):
        raise ValueError(f"shard arrays {images.shape}, {scene.shape}, {seed.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"tmp_{os.getpid()}_{path.name}")
    with tmp.open("wb") as f:
        np.savez_compressed(
            f,
            images=images.astype(np.uint8),
            scene=scene.astype(np.float32),
            seed=seed.astype(np.int64),
        )
    os.replace(tmp, path)


@dataclass(frozen=True)
class SceneFrame:
    images: dict[str, np.ndarray]  # camera -> (H, W, 3) uint8
    scene: np.ndarray  # (9,) object, goal, hand positions (world, m)


def scene_frames_of(
    env: ManipulationEnv, seed: int, frames: int, max_gap: int, action_noise: float
) -> list[SceneFrame]:
    """The frames of one layout: its reset frame, then one after each random stretch of noisy
    expert steps (seeded by `seed`; the episode's length bounds the stretches)."""
    rng = np.random.default_rng([int(seed), 0x5CE7E])
    obs = env.reset(seed)
    assert obs.frames is not None
    out = [SceneFrame(obs.frames, scene_of(obs.state))]
    for _ in range(frames - 1):
        gap = int(rng.integers(1, max_gap + 1))
        for k in range(gap):
            action = env.expert_action()
            action[:-1] += rng.normal(0.0, action_noise, len(action) - 1)
            obs = env.step(action, render=k == gap - 1)
        assert obs.frames is not None
        out.append(SceneFrame(obs.frames, scene_of(obs.state)))
    return out


@dataclass
class SceneFrames:
    """Every shard of a scene-frame folder in memory, cameras in the order asked for."""

    images: np.ndarray  # (N, K, H, W, 3) uint8
    scene: np.ndarray  # (N, 9) float32
    seed: np.ndarray  # (N,) int64
    task: np.ndarray  # (N,) index into `tasks`
    tasks: list[str]

    def __len__(self) -> int:
        return len(self.scene)


def load_scene_frames(
    root: str | Path, cameras: Sequence[str], image_size: int | None = None
) -> SceneFrames:
    """Read a scene-frame folder (blockplan robot-scenes) with the cameras a model reads."""
    root = Path(root)
    path = root / MANIFEST
    if not path.is_file():
        raise UserError(f"{root}: no {MANIFEST}; make scene frames with `blockplan robot-scenes`")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    missing = [c for c in cameras if c not in manifest["cameras"]]
    if missing:
        raise UserError(f"{root}: no camera {missing[0]!r} (it has {manifest['cameras']})")
    if image_size is not None and manifest["image_size"] != image_size:
        raise UserError(
            f"{root}: {manifest['image_size']}-pixel frames, the model reads {image_size}"
        )
    pick = [manifest["cameras"].index(c) for c in cameras]
    images, scene, seeds, task_of = [], [], [], []
    tasks = list(manifest["tasks"])
    for ti, task in enumerate(tasks):
        for shard in sorted((root / task).glob("seeds_*.npz")):
            with np.load(shard, allow_pickle=False) as z:
                images.append(z["images"][:, pick])
                scene.append(z["scene"])
                seeds.append(z["seed"])
                task_of.append(np.full(len(z["seed"]), ti, dtype=np.int64))
    if not images:
        raise UserError(f"{root}: no shards yet")
    return SceneFrames(
        np.concatenate(images),
        np.concatenate(scene).astype(np.float32),
        np.concatenate(seeds),
        np.concatenate(task_of),
        tasks,
    )
