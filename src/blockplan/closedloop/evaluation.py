"""The closed-loop evaluation: every policy on every seed, the same seeds for all.

A seed whose expert crashes during the shared warm-up cannot be evaluated (no policy has
control yet): it is skipped for every policy and reported. `--render-dir` writes camera grids
of the first planner episode only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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

    def summary(self) -> dict[str, Any]:
        """policy -> the aggregate the JSON reports (`metrics.aggregate`)."""
        return {p: aggregate(self.results[p]) for p in self.policies}

    def episodes(self) -> list[dict[str, Any]]:
        """Every episode as JSON, policy by policy."""
        return [r.to_json() for p in self.policies for r in self.results[p]]


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
