"""Writes (or resumes) a data set: one shard per kept episode, the manifest, the export.

Episodes whose expert crashed (`crashed_at`), or backs up in the future of every sample
(`reversed_at`, see `episode_samples`), are recorded as dropped, and the next seed is tried.

Episodes can run in worker processes. Seeds are still handed out in order and a new one
only when (kept + running) < wanted, so the kept seeds are the first `episodes` seeds that
do not crash, exactly as in a sequential run, and every shard is byte-identical.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from blockplan.sim.dataset import (
    FORMAT_VERSION,
    MANIFEST,
    REVERSING_SPEED_MPS,
    SPLITS,
    DatasetError,
    DatasetOptions,
    _sha256,
    _write_json_atomic,
    episode_perturbations,
    episode_samples,
    save_shard,
    split_of,
)
from blockplan.sim.episode import EGO_SPEED, run_episode
from blockplan.sim.labels import explanation_budget_fits
from blockplan.sim.rig import Rig
from blockplan.sim.scenarios import get_scenario


def make_episode(
    root: Path, options: DatasetOptions, rig: Rig, scenario: str, seed: int, export: bool
) -> tuple[bool, dict[str, Any]]:
    """Simulate, render, label and write one episode: (kept, manifest entry)."""
    if options.policy_model is not None:
        return _make_dagger_episode(root, options, rig, scenario, seed)
    log = run_episode(
        get_scenario(scenario), seed, options.duration_s, episode_perturbations(options, seed)
    )
    if log.crashed_at is not None:
        return False, {"scenario": scenario, "seed": seed, "crashed_at": round(log.crashed_at, 3)}
    split = split_of(seed, options.val_fraction, options.test_fraction)
    arrays, frames = episode_samples(log, rig, options, explanation_budget_fits())
    if arrays is None:  # the expert backs up (or is perturbed) in every sample's future
        reversing = np.flatnonzero(log.ego[:, EGO_SPEED] < REVERSING_SPEED_MPS)
        if not len(reversing):  # no clean future: the perturbations left none
            return False, {"scenario": scenario, "seed": seed, "all_futures_perturbed": True}
        at = round(float(log.t[reversing[0]]), 3)
        return False, {"scenario": scenario, "seed": seed, "reversed_at": at}
    shard = root / split / f"{scenario}-{seed:06d}.npz"
    shard.parent.mkdir(parents=True, exist_ok=True)
    save_shard(shard, arrays)
    if export:
        from blockplan.sim.fastddrive import write_episode_export

        write_episode_export(root, split, scenario, seed, arrays, frames)
    return True, {
        "scenario": scenario,
        "seed": seed,
        "split": split,
        "shard": str(shard.relative_to(root)),
        "num_samples": int(arrays["stamp_ns"].shape[0]),
        "sha256": _sha256(shard),
    }


def _make_dagger_episode(
    root: Path, options: DatasetOptions, rig: Rig, scenario: str, seed: int
) -> tuple[bool, dict[str, Any]]:
    """The on-policy variant of `make_episode` (closedloop/dagger.py)."""
    from blockplan.closedloop.dagger import dagger_samples

    arrays, info = dagger_samples(options, rig, scenario, seed)
    entry: dict[str, Any] = {"scenario": scenario, "seed": seed, **info}
    if arrays is None:
        return False, {**entry, "no_samples": True}
    split = split_of(seed, options.val_fraction, options.test_fraction)
    shard = root / split / f"{scenario}-{seed:06d}.npz"
    shard.parent.mkdir(parents=True, exist_ok=True)
    save_shard(shard, arrays)
    return True, {
        **entry,
        "split": split,
        "shard": str(shard.relative_to(root)),
        "num_samples": int(arrays["stamp_ns"].shape[0]),
        "sha256": _sha256(shard),
    }


class DatasetWriter:
    """Generates (or resumes) a data set in `root`."""

    def __init__(
        self,
        root: str | Path,
        options: DatasetOptions,
        rig: Rig,
        export_fastddrive: bool = True,
        workers: int = 1,
    ) -> None:
        if workers < 1:
            raise DatasetError(f"workers={workers}: must be >= 1")
        self.root = Path(root)
        self.options = options
        self.rig = rig
        self.export_fastddrive = export_fastddrive
        self.workers = workers
        self.manifest = self._load_or_create_manifest()

    def _options_doc(self) -> dict[str, Any]:
        doc = asdict(self.options)
        doc["scenarios"] = list(self.options.scenarios)
        for name in ("start_s", "perturb_every_s", "policy_model", "branch_every_s"):
            if doc[name] is None:  # defaults: older data sets still match
                del doc[name]
        if self.options.policy_model is not None:  # resume only with the same weights
            from blockplan.planner.loading import ModelLoadError, resolve_model_dir

            try:
                folder = resolve_model_dir(self.options.policy_model, where="--policy-model")
            except ModelLoadError:  # a baseline (constant-velocity) or random-init
                folder = None
            if folder is not None:
                doc["policy_weights_sha256"] = _sha256(Path(folder) / "model.safetensors")
        doc["cameras"] = list(self.rig.names)
        doc["image_size"] = [self.rig.cameras[0].height, self.rig.cameras[0].width]
        return doc

    def _load_or_create_manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST
        if path.is_file():
            manifest = json.loads(path.read_text())
            written, now = manifest.get("options") or {}, self._options_doc()
            if written != now:
                differ = sorted(k for k in {*written, *now} if written.get(k) != now.get(k))
                what = ", ".join(f"{k} {written.get(k)!r} (now {now.get(k)!r})" for k in differ)
                raise DatasetError(
                    f"{path}: written with other options: {what}; use another --out or the "
                    "same options to resume"
                )
            return manifest
        self.root.mkdir(parents=True, exist_ok=True)
        return {
            "format_version": FORMAT_VERSION,
            "created_by": "blockplan dataset",
            "options": self._options_doc(),
            "episodes": [],
            "dropped": [],
        }

    def _done(self) -> set[tuple[str, int]]:
        entries = self.manifest["episodes"] + self.manifest["dropped"]
        return {(e["scenario"], e["seed"]) for e in entries}

    def _kept(self, scenario: str) -> int:
        return sum(e["scenario"] == scenario for e in self.manifest["episodes"])

    def _pending(self) -> list[list[tuple[str, int]]]:
        """Per scenario, the seeds not yet tried, in order (at most the attempt limit)."""
        o, done = self.options, self._done()
        return [
            [
                (sc, o.seed_base + k)
                for k in range(o.episodes * o.max_attempts_factor)
                if (sc, o.seed_base + k) not in done
            ]
            for sc in o.scenarios
        ]

    def _record(self, kept: bool, entry: dict[str, Any]) -> None:
        self.manifest["episodes" if kept else "dropped"].append(entry)
        _write_json_atomic(self.root / MANIFEST, self.manifest)

    def run(self, progress: bool = False) -> dict[str, Any]:
        o = self.options
        bar = tqdm(
            total=len(o.scenarios) * o.episodes, desc="episodes", unit="ep", disable=not progress
        )
        bar.update(sum(min(self._kept(s), o.episodes) for s in o.scenarios))
        args = (self.root, o, self.rig)
        if self.workers == 1:
            for queue in self._pending():
                for scenario, seed in queue:
                    if self._kept(scenario) >= o.episodes:
                        break
                    kept, entry = make_episode(*args, scenario, seed, self.export_fastddrive)
                    self._record(kept, entry)
                    bar.update(int(kept))
        else:
            self._run_parallel(args, bar)
        bar.close()
        key = {sc: i for i, sc in enumerate(o.scenarios)}
        for name in ("episodes", "dropped"):  # the order a sequential run gives
            self.manifest[name].sort(key=lambda e: (key[e["scenario"]], e["seed"]))
        self.manifest["counts"] = self._counts()
        _write_json_atomic(self.root / MANIFEST, self.manifest)
        if self.export_fastddrive:
            from blockplan.sim.fastddrive import assemble_export

            assemble_export(self.root, self.manifest)
        return self.manifest

    def _run_parallel(self, args: tuple[Any, ...], bar: Any) -> None:
        o = self.options
        queues = dict(zip(o.scenarios, self._pending(), strict=True))
        running: dict[Future, str] = {}
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
            while True:
                for scenario, queue in queues.items():  # hand out seeds in order
                    busy = sum(s == scenario for s in running.values())
                    while (
                        queue
                        and len(running) < self.workers
                        and (self._kept(scenario) + busy < o.episodes)
                    ):
                        _, seed = queue.pop(0)
                        future = pool.submit(
                            make_episode, *args, scenario, seed, self.export_fastddrive
                        )
                        running[future] = scenario
                        busy += 1
                if not running:
                    return
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    running.pop(future)
                    kept, entry = future.result()
                    self._record(kept, entry)
                    bar.update(int(kept))

    def _counts(self) -> dict[str, Any]:
        m = self.manifest
        samples = {
            s: sum(e["num_samples"] for e in m["episodes"] if e["split"] == s) for s in SPLITS
        }
        episodes = {s: sum(e["split"] == s for e in m["episodes"]) for s in SPLITS}

        def dropped(key: str) -> dict[str, int]:
            return {
                sc: sum(d["scenario"] == sc and key in d for d in m["dropped"])
                for sc in self.options.scenarios
            }

        return {
            "samples": samples,
            "episodes": episodes,
            "dropped_crashes": dropped("crashed_at"),
            "dropped_reversing": dropped("reversed_at"),
        }
