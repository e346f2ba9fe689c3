"""Which planner a replay runs: a model folder (blockplan.planner's Planner), a randomly
initialised model of a preset size, or a named baseline.

`--model` accepts:
* a folder (as given, or relative to the package root where models/ ships);
* `random-init` or `random-init:<preset>` — blockplan.planner's Planner with random weights;
* `constant-velocity` — the baseline of docs/ALGORITHMS.md §9.

The resolution is the live node's (`blockplan.planner.loading.load_model`); a folder's manifest is
verified when present but not required here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from blockplan.config import PlannerConfig
from blockplan.planner import loading as models
from blockplan.replay.topics import ReplayInputError
from blockplan.runtime import RuntimePlanner

log = logging.getLogger(__name__)
BASELINES = models.BASELINES
RANDOM_INIT = models.RANDOM_INIT


def resolve_model_dir(model: str) -> Path:
    """`model` as given, or relative to the package root (where models/ is shipped)."""
    try:
        return models.resolve_model_dir(model, "--model")
    except models.ModelLoadError as e:
        raise ReplayInputError(str(e)) from e


def load_planner(model: str, config: PlannerConfig, warm_up: bool = True) -> RuntimePlanner:
    """The planner for a replay, warmed up as the node warms it up on activation, so the
    first plan's latency in a `measured` replay is the vehicle's, not a cold start's."""
    try:
        planner = models.load_model(model, config, "--model", require_manifest=False)
        if warm_up:
            log.info("warm-up plan took %.0f ms", models.warm_up(planner, config))
        return planner
    except models.ModelLoadError as e:
        raise ReplayInputError(str(e)) from e
