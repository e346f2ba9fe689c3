"""The closed-loop evaluation: every policy on every seed, the same seeds for all.

A seed whose expert crashes during the shared warm-up cannot be evaluated (no policy has
control yet): it is skipped for every policy and reported. `--render-dir` writes camera grids
of the first planner episode only.

An episode fails when the ego collides, leaves the road or makes no progress. No progress:
the episode ended without a collision or a departure, yet the ego drove less than
`NO_PROGRESS_SHARE` of the path the expert drove on the same seed in the same time (a planner
that stops short of the junction, or crawls, avoids the other two failures). It needs the
expert in the same run; without it `no_progress_rate` and `failure_rate` are None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from blockplan.closedloop.episode import (
    EXPERT,
    EpisodeSpec,
    WarmupCrash,
    run_expert_episode,
    run_planner_episode,
)
from blockplan.closedloop.frames_out import FrameWriter
from blockplan.closedloop.metrics import EpisodeResult, aggregate
from blockplan.config import PlannerConfig
from blockplan.runtime import RuntimePlanner
from blockplan.sim.rig import Rig

# An episode makes no progress below this share of the expert's path on the same seed.
NO_PROGRESS_SHARE = 0.5


class Progress(Protocol):
    """What the evaluation reports progress to (a tqdm bar fits)."""

    def set_postfix_str(self, s: str) -> None: ...

    def update(self, n: int = 1) -> None: ...


class _Silent:
    def set_postfix_str(self, s: str) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass


@dataclass
class Evaluation:
    """results: policy -> its episodes, in seed order (only seeds every policy ran).
    skipped_seeds: seeds whose expert crashed in the warm-up. frames: PNGs written."""

    policies: tuple[str, ...]
    results: dict[str, list[EpisodeResult]]
    skipped_seeds: list[int] = field(default_factory=list)
    frames: list[Path] = field(default_factory=list)

    def no_progress(self, policy: str) -> list[bool] | None:
        """Per episode of `policy`: did it end without a collision or a departure, short of
        `NO_PROGRESS_SHARE` of the expert's path on that seed (the expert never, by this
        measure). None without the expert in the run."""
        if EXPERT not in self.results:
            return None
        expert = {r.seed: r.progress_m for r in self.results[EXPERT]}
        return [
            not (r.collided or r.departed) and r.progress_m < NO_PROGRESS_SHARE * expert[r.seed]
            for r in self.results[policy]
        ]

    def summary(self) -> dict[str, Any]:
        """policy -> the aggregate the JSON reports (`metrics.aggregate`), with the share of
        its episodes that made no progress and the share that failed (a collision, a
        departure or no progress); None where the run has no expert."""
        out = {}
        for p in self.policies:
            m = aggregate(self.results[p])
            stalled = self.no_progress(p)
            if stalled is None or not stalled:
                m["no_progress_rate"] = m["failure_rate"] = None
            else:
                failed = [
                    r.collided or r.departed or s
                    for r, s in zip(self.results[p], stalled, strict=True)
                ]
                m["no_progress_rate"] = float(np.mean(stalled))
                m["failure_rate"] = float(np.mean(failed))
            out[p] = m
        return out

    def episodes(self) -> list[dict[str, Any]]:
        """Every episode as JSON, policy by policy, with `no_progress` (None without the
        expert in the run)."""
        rows = []
        for p in self.policies:
            stalled = self.no_progress(p) or [None] * len(self.results[p])
            for r, s in zip(self.results[p], stalled, strict=True):
                rows.append({**r.to_json(), "no_progress": s})
        return rows


def run_evaluation(
    specs: Sequence[EpisodeSpec],
    policies: Sequence[str],
    planners: Mapping[str, RuntimePlanner],
    config: PlannerConfig,
    rig: Rig,
    render_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Run `policies` (EXPERT, or names of `planners`) on every spec. One update of
    `progress` per episode (the episodes a skipped seed did not run included)."""
    progress = progress or _Silent()
    results: dict[str, list[EpisodeResult]] = {p: [] for p in policies}
    skipped: list[int] = []
    writer = None
    for spec in specs:
        episode: dict[str, EpisodeResult] = {}
        try:
            for policy in policies:
                progress.set_postfix_str(f"seed {spec.seed} {policy}")
                if policy == EXPERT:
                    episode[policy] = run_expert_episode(spec)
                else:
                    sink = None
                    if render_dir and writer is None:
                        prefix = f"{spec.scenario.name}-{spec.seed}"
                        writer = sink = FrameWriter(render_dir, prefix)
                    episode[policy] = run_planner_episode(
                        spec, policy, planners[policy], config, rig, frame_sink=sink
                    )
                progress.update(1)
        except WarmupCrash:
            skipped.append(spec.seed)
            progress.update(len(policies) - len(episode))
            continue
        for policy, result in episode.items():
            results[policy].append(result)
    frames = list(writer.written) if writer is not None else []
    return Evaluation(tuple(policies), results, skipped, frames)
