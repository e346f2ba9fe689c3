"""Offline replay: the control loop over a ROS 2 bag on its virtual clock, with metrics, an
HTML report and PNG plots (docs/DESIGN.md §5)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.config import PlannerConfig
from blockplan.replay.driver import (
    ReplayInterrupted,
    ReplayResult,
    check_bag,
    no_empty_folders_left,
    prepare_output_dir,
    replay_bag,
)
from blockplan.replay.planners import load_planner
from blockplan.replay.plots import summary_plots
from blockplan.replay.report import write_atomic, write_report
from blockplan.replay.topics import ReplayInputError, ReplayOutputError
from blockplan.runtime import RuntimePlanner
from blockplan.runtime.plans import PlanWindow

__all__ = [
    "ReplayInputError",
    "ReplayInterrupted",
    "ReplayOutputError",
    "ReplayOutputs",
    "ReplayResult",
    "check_bag",
    "load_planner",
    "no_empty_folders_left",
    "prepare_output_dir",
    "replay_bag",
    "run_replay",
]


@dataclass(frozen=True)
class ReplayOutputs:
    result: ReplayResult
    plans_bag: Path
    metrics_json: Path
    report_html: Path
    plots: tuple[Path, ...]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.result.metrics


def run_replay(
    bag: str | Path,
    out_dir: str | Path,
    planner: RuntimePlanner,
    config: PlannerConfig,
    timing: str = "ideal",
    rate_hz: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    extra_metrics: dict[str, Any] | None = None,
    request_windows: Sequence[PlanWindow] | None = None,
) -> ReplayOutputs:
    """Replay `bag` and write plans.mcap, metrics.json, report.html and the PNG plots.

    Ctrl-C during the replay writes them for the ticks done (metrics.json and the report say
    `interrupted`) and then raises `ReplayInterrupted` carrying these outputs.
    `request_windows`: follow a live run's requests (`blockplan.replay.requests`)."""
    out_dir = Path(out_dir)
    try:
        result = replay_bag(
            bag,
            out_dir,
            planner,
            config,
            timing,
            rate_hz,
            progress=progress,
            request_windows=request_windows,
        )
    except ReplayInterrupted as stop:
        outputs = _write_outputs(stop.result, out_dir, config, extra_metrics)
        raise ReplayInterrupted(stop.result, outputs) from None
    return _write_outputs(result, out_dir, config, extra_metrics)


def _write_outputs(
    result: ReplayResult,
    out_dir: Path,
    config: PlannerConfig,
    extra_metrics: dict[str, Any] | None,
) -> ReplayOutputs:
    metrics = {**result.metrics, **(extra_metrics or {})}
    metrics_json = out_dir / "metrics.json"
    write_atomic(metrics_json, (json.dumps(metrics, indent=2) + "\n").encode())
    plots = summary_plots(result.log)
    plot_paths = []
    for name, png in plots:
        write_atomic(out_dir / name, png)
        plot_paths.append(out_dir / name)
    report = write_report(out_dir / "report.html", result.log, metrics, config.camera_names, plots)
    return ReplayOutputs(
        dataclasses.replace(result, metrics=metrics),
        result.plans_bag,
        metrics_json,
        report,
        tuple(plot_paths),
    )
