"""The robot data set: demonstrations as one npz shard per episode (docs/SCHEMA.md "The robot
data set"). "Robots II" fills it from Meta-World demonstrations; the tests fill it with
`write_synthetic_dataset`.

Layout of DIR:

    manifest.json                 format, cameras, dimensions, one entry per episode
    <split>/episode_<k>.npz       one shard per episode (split: train, val or test)

A shard holds one episode of T control steps:

    frames       (T, K, H, W, 3) uint8   the K cameras of the manifest at each step, in its order
    proprio      (T, S) float32          the proprioceptive state at each step
    actions      (T, D) float32          the action commanded at each step
    instruction  () str                  the episode's language instruction
    stamp_ns     (T,) int64              the step's time

A training sample is a step t: the frames at t (and, for a model with F frames per camera,
at t − frame_stride·(F − 1 − j), held at the first step before the episode starts), the
state at t, the instruction, and the chunk actions[t : t + H], whose steps past the episode's
end repeat its last action. The bins cover per-dimension ranges from the training split's
statistics (`data_ranges`), which the model folder's config records.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.schema.action import range_from_data

MANIFEST = "manifest.json"
FORMAT = "blockplan-robot/1"
SPLITS = ("train", "val", "test")
SHARD_KEYS = ("frames", "proprio", "actions", "instruction", "stamp_ns")
# the optional `scene` array: object xyz, goal xyz, hand xyz (m, world) per step; shards and
# bags from before the hand hold 6 columns, read with the hand unknown (NaN)
SCENE_DIM = 9


class RobotDataError(ValueError):
    """A robot data folder or episode that cannot be read or written; names what."""


def full_scene(scene: np.ndarray) -> np.ndarray:
    """(T, 6 or 9) -> (T, 9) float32, the hand NaN where it was not recorded."""
    scene = np.asarray(scene, dtype=np.float32)
    if scene.ndim != 2 or scene.shape[1] not in (6, SCENE_DIM):
        raise RobotDataError(f"scene {scene.shape}: expected (T, 6) or (T, {SCENE_DIM})")
    if scene.shape[1] == 6:
        scene = np.concatenate([scene, np.full((len(scene), 3), np.nan, np.float32)], 1)
    return scene


@dataclass
class RobotDatasetWriter:
    """Writes episodes as shards and the manifest (`close`, or leave the `with` block).

    with RobotDatasetWriter(root, ("front", "wrist"), proprio_dim=8, action_dim=7) as w:
        w.add("train", frames, proprio, actions, "open the drawer", task="drawer-open")
    """

    root: Path
    camera_names: tuple[str, ...]
    proprio_dim: int
    action_dim: int
    control_period_s: float = 0.1
    info: dict[str, Any] = field(default_factory=dict)  # free-form provenance (source, seeds)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.camera_names = tuple(self.camera_names)
        if not self.camera_names or self.action_dim < 1 or self.proprio_dim < 0:
            raise RobotDataError("need >= 1 camera, action_dim >= 1 and proprio_dim >= 0")

    def __enter__(self) -> RobotDatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()

    def add(
        self,
        split: str,
        frames: np.ndarray,
        proprio: np.ndarray,
        actions: np.ndarray,
        instruction: str,
        task: str = "",
        stamp_ns: np.ndarray | None = None,
        scene: np.ndarray | None = None,
    ) -> Path:
        """Write one episode's shard; returns its path. `scene`: (T, 9) the object's, the
        goal's and the hand's positions per step (simulator ground truth, training targets;
        (T, 6) without the hand)."""
        if split not in SPLITS:
            raise RobotDataError(f"split={split!r}: must be one of {list(SPLITS)}")
        frames = np.asarray(frames)
        T = len(frames)
        K = len(self.camera_names)
        if frames.dtype != np.uint8 or frames.ndim != 5 or frames.shape[1] != K or T < 1:
            raise RobotDataError(
                f"frames {frames.shape} {frames.dtype}: expected (T, {K}, H, W, 3)"
            )
        proprio = np.asarray(proprio, dtype=np.float32).reshape(T, self.proprio_dim)
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != (T, self.action_dim) or not np.all(np.isfinite(actions)):
            raise RobotDataError(
                f"actions {actions.shape}: expected finite ({T}, {self.action_dim})"
            )
        extra = {}
        if scene is not None:
            extra["scene"] = full_scene(np.asarray(scene).reshape(T, -1))
        if stamp_ns is None:
            stamp_ns = np.round(np.arange(T) * self.control_period_s * 1e9).astype(np.int64)
        name = f"{split}/episode_{len(self.episodes):05d}.npz"
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(
            tmp,
            frames=frames,
            proprio=proprio,
            actions=actions,
            instruction=np.asarray(instruction),
            stamp_ns=np.asarray(stamp_ns, dtype=np.int64),
            **extra,
        )
        os.replace(tmp, path)
        entry = {"shard": name, "split": split, "num_steps": T, "instruction": instruction}
        self.episodes.append({**entry, "task": task})
        return path

    def close(self) -> Path:
        manifest = {
            "format": FORMAT,
            "camera_names": list(self.camera_names),
            "proprio_dim": self.proprio_dim,
            "action_dim": self.action_dim,
            "control_period_s": self.control_period_s,
            "info": self.info,
            "episodes": self.episodes,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / MANIFEST
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        return path


def read_robot_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise RobotDataError(f"{root}: no {MANIFEST} (not a robot data set)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise RobotDataError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def load_episode(root: str | Path, entry: dict[str, Any], manifest: dict[str, Any]) -> dict:
    """One shard's arrays, checked against the manifest."""
    path = Path(root) / entry["shard"]
    try:
        with np.load(path, allow_pickle=False) as shard:
            episode = {k: shard[k] for k in SHARD_KEYS}
            if "scene" in shard.files:
                episode["scene"] = full_scene(shard["scene"])
    except (OSError, KeyError, ValueError) as e:
        raise RobotDataError(f"{path}: {e}") from e
    T, K = entry["num_steps"], len(manifest["camera_names"])
    shapes = {
        "frames": episode["frames"].shape[:2] == (T, K),
        "proprio": episode["proprio"].shape == (T, manifest["proprio_dim"]),
        "actions": episode["actions"].shape == (T, manifest["action_dim"]),
    }
    bad = [k for k, ok in shapes.items() if not ok]
    if bad:
        raise RobotDataError(f"{path}: {bad[0]} {episode[bad[0]].shape} does not fit the manifest")
    episode["instruction"] = str(episode["instruction"])
    return episode


def episodes_of(root: str | Path, split: str) -> list[dict[str, Any]]:
    manifest = read_robot_manifest(root)
    entries = [e for e in manifest["episodes"] if e["split"] == split]
    return [load_episode(root, e, manifest) for e in entries]


def data_ranges(
    root: str | Path, quantile: float = 0.01, split: str = "train"
) -> dict[str, tuple[float, ...]]:
    """Per-dimension bin ranges from `split`: `action_low/high` and `proprio_low/high` (the
    `quantile` and 1 − `quantile` quantiles, `schema.action.range_from_data`)."""
    episodes = episodes_of(root, split)
    if not episodes:
        raise RobotDataError(f"{root}: no episodes in split {split!r}")
    out: dict[str, tuple[float, ...]] = {}
    for name in ("actions", "proprio"):
        values = np.concatenate([e[name] for e in episodes]).astype(np.float64)
        key = "action" if name == "actions" else "proprio"
        if values.shape[-1]:
            out[f"{key}_low"], out[f"{key}_high"] = range_from_data(values, quantile)
        else:
            out[f"{key}_low"], out[f"{key}_high"] = (), ()
    return out


def chunk_at(actions: np.ndarray, t: int, horizon: int) -> np.ndarray:
    """actions[t : t + H] (H, D); steps past the end repeat the last action."""
    index = np.minimum(np.arange(t, t + horizon), len(actions) - 1)
    return np.asarray(actions[index], dtype=np.float64)


def frame_indices(t: int, num_frames: int, stride: int = 1) -> np.ndarray:
    """The steps of a sample's F frames, oldest first, held at 0 before the start."""
    return np.maximum(t - stride * np.arange(num_frames - 1, -1, -1), 0)


# ---- a synthetic data set (tests, smoke runs) --------------------------------------------------


SYNTHETIC_TASKS = (
    ("reach", "reach the red target"),
    ("push", "push the blue block to the left"),
    ("lift", "lift the green cube"),
)


def write_synthetic_dataset(
    root: str | Path,
    episodes: dict[str, int] | None = None,
    num_steps: int = 12,
    camera_names: tuple[str, ...] = ("front", "wrist"),
    image_size: tuple[int, int] = (16, 16),
    action_dim: int = 3,
    proprio_dim: int = 2,
    seed: int = 0,
) -> Path:
    """A small learnable data set: each task moves the arm towards its own target with a
    smooth proportional action, the state integrates the actions, and the images show the
    task's colour and the arm's position. Returns the manifest path."""
    episodes = episodes or {"train": 6, "val": 2}
    rng = np.random.default_rng(seed)
    H, W = image_size
    K = len(camera_names)
    info = {"source": "write_synthetic_dataset", "seed": seed}
    with RobotDatasetWriter(Path(root), camera_names, proprio_dim, action_dim, info=info) as w:
        for split, count in episodes.items():
            for k in range(count):
                task_id = k % len(SYNTHETIC_TASKS)  # every split holds every task
                task, instruction = SYNTHETIC_TASKS[task_id]
                target = np.linspace(-0.6, 0.6, len(SYNTHETIC_TASKS))[task_id]
                position = rng.uniform(-0.5, 0.5, action_dim)
                frames = np.zeros((num_steps, K, H, W, 3), np.uint8)
                proprio = np.zeros((num_steps, proprio_dim), np.float32)
                actions = np.zeros((num_steps, action_dim), np.float32)
                scene = np.zeros((num_steps, SCENE_DIM), np.float32)  # arm, target, arm
                for t in range(num_steps):
                    actions[t] = np.clip(0.5 * (target - position), -1, 1)
                    arm = np.resize(position, 3)
                    scene[t] = np.r_[arm, [target] * 3, arm]
                    proprio[t] = position[:proprio_dim] if proprio_dim <= action_dim else 0.0
                    colour = np.zeros(3)
                    colour[task_id % 3] = 200
                    frames[t] = rng.integers(0, 30, (K, H, W, 3))
                    frames[t, :, : H // 2] += colour.astype(np.uint8)
                    col = int((position[0] + 1) / 2 * (W - 1))
                    frames[t, :, H // 2 :, max(col, 0) : col + 2] = 255
                    position = position + 0.5 * actions[t]
                w.add(split, frames, proprio, actions, instruction, task=f"{task}-{k}", scene=scene)
    return Path(root) / MANIFEST
