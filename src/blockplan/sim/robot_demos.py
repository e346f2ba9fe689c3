"""Meta-World demonstrations → bags → a robot data set (`blockplan robot-demos`; docs/SIM.md
"Robots").

OUT/bags/<split>/<task>/seed_<seed>.mcap   one bag per scripted-expert episode (robot_bag.py)
OUT/dataset/                               the robot data set (train/robot_data.py) built from
                                           the bags, split by seed (manipulation.seeds_of)

Generation is resumable (a bag that exists is kept; a bag is written under a temporary name
and moved into place) and can be spread over processes (`worker`, `num_workers`: worker i
records the episodes i, i + n, …). Episodes are interleaved across tasks and splits, so a
run stopped early still holds every task. Only successful demonstrations go into the data
set (the count of failed ones is in its manifest's info).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from blockplan.sim.manipulation import (
    CONTROL_PERIOD_S,
    JOINT_NAMES,
    ManipulationEnv,
    run_expert,
    seeds_of,
    task_spec,
)
from blockplan.sim.robot_bag import read_demo_bag, write_demo_bag
from blockplan.train.robot_data import RobotDatasetWriter

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")


def episode_plan(tasks: Sequence[str], counts: dict[str, int]) -> list[tuple[str, str, int]]:
    """(split, task, seed) of every episode, interleaved: the k-th episode of every split and
    task before the (k+1)-th of any."""
    for t in tasks:
        task_spec(t)
    per = {s: list(seeds_of(s, counts.get(s, 0))) for s in SPLITS}
    out = []
    for k in range(max(counts.values(), default=0)):
        for split in SPLITS:
            if k < len(per[split]):
                out.extend((split, t, per[split][k]) for t in tasks)
    return out


def bag_path(root: Path, split: str, task: str, seed: int) -> Path:
    return root / "bags" / split / task / f"seed_{seed:06d}.mcap"


def record_demos(
    out: str | Path,
    tasks: Sequence[str],
    counts: dict[str, int],
    render_every: int = 4,
    image_size: int = 64,
    cameras: tuple[str, ...] = ("front", "wrist"),
    max_steps: int = 200,
    worker: int = 0,
    num_workers: int = 1,
    progress_every: int = 10,
    action_noise: float = 0.0,
) -> dict[str, int]:
    """Record the scripted expert's episodes of `tasks` as bags under OUT/bags (resumable:
    an existing bag is kept). `action_noise`: noise-injected training episodes
    (`run_expert`); validation and test episodes are always clean."""
    root = Path(out)
    plan = episode_plan(tasks, counts)[worker::num_workers]
    envs: dict[str, ManipulationEnv] = {}
    done = skipped = 0
    started = time.monotonic()
    for split, task, seed in plan:
        path = bag_path(root, split, task, seed)
        if path.exists():
            skipped += 1
            continue
        if task not in envs:
            envs[task] = ManipulationEnv(task, image_size, cameras)
        noise = action_noise if split == "train" else 0.0
        demo = run_expert(envs[task], seed, render_every, max_steps, action_noise=noise)
        tmp = path.with_name(f"tmp_{os.getpid()}_{path.name}")
        if tmp.exists():
            tmp.unlink()
        extra = {"split": split, "render_every": render_every, "action_noise": noise}
        write_demo_bag(demo, tmp, extra=extra)
        os.replace(tmp, path)
        done += 1
        if done % progress_every == 0:
            rate = (time.monotonic() - started) / done
            log.info(
                "worker %d: %d recorded (%.1f s each), %d kept, %d left",
                worker,
                done,
                rate,
                skipped,
                len(plan) - done - skipped,
            )
    for env in envs.values():
        env.close()
    return {"recorded": done, "kept": skipped, "planned": len(plan)}


def build_dataset(out: str | Path, cameras: tuple[str, ...] = ("front", "wrist")) -> Path:
    """Every bag under OUT/bags → OUT/dataset (successful demonstrations only)."""
    root = Path(out)
    bags = sorted((root / "bags").glob("*/*/seed_*.mcap"))
    dataset = root / "dataset"
    failed: dict[str, int] = {}
    counts: dict[str, int] = {}
    info = {
        "source": "Meta-World scripted experts (metaworld.policies), blockplan robot-demos",
        "bags": str(root / "bags"),
        "proprio": f"joint positions {list(JOINT_NAMES)} (rad / m)",
        "actions": "(dx, dy, dz, grip) in [-1, 1]: end-effector delta 1 cm per unit and step",
    }
    with RobotDatasetWriter(dataset, cameras, len(JOINT_NAMES), 4, CONTROL_PERIOD_S, info) as w:
        for path in bags:
            split, task = path.parent.parent.name, path.parent.name
            episode = read_demo_bag(path, cameras)
            if not episode.info.get("success"):
                failed[task] = failed.get(task, 0) + 1
                continue
            w.add(
                split,
                episode.frames,
                episode.joints.astype(np.float32),
                episode.actions.astype(np.float32),
                episode.instruction,
                task=f"{task}/seed_{episode.info['seed']}",
                stamp_ns=episode.stamp_ns - episode.stamp_ns[0],
                scene=episode.scene,
            )
            counts[f"{split}/{task}"] = counts.get(f"{split}/{task}", 0) + 1
        w.info.update(failed_demonstrations=failed, episodes=counts)
    (dataset / "counts.json").write_text(
        json.dumps({"episodes": counts, "failed": failed}, indent=1)
    )
    return dataset
