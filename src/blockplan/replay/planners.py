"""Which planner a replay runs: a model folder (blockplan.engine's Planner), a randomly
initialised model of a preset size, or a named baseline.

`--model` accepts:
* a folder (as given, or relative to the package root where models/ ships);
* `random-init` or `random-init:<preset>` — blockplan.engine's Planner with random weights;
* `constant-velocity` — the baseline of ALGORITHMS.md §9.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from blockplan.config import PlannerConfig, package_root
from blockplan.replay.topics import ReplayInputError
from blockplan.runtime import ConstantVelocityPlanner, Planner

BASELINES = {"constant-velocity": ConstantVelocityPlanner}
RANDOM_INIT = "random-init"


def resolve_model_dir(model: str) -> Path:
    """`model` as given, or relative to the package root (where models/ is shipped)."""
    path = Path(model)
    if path.is_dir():
        return path
    shipped = package_root() / model
    if shipped.is_dir():
        return shipped
    raise ReplayInputError(
        f"--model {model!r}: no such model folder (nor under {package_root()}); "
        f"other choices: {sorted(BASELINES)} or {RANDOM_INIT}[:PRESET]"
    )


def _engine_planner_class(model: str) -> type:
    try:
        return importlib.import_module("blockplan.engine.planner").Planner
    except (ImportError, AttributeError) as e:
        raise ReplayInputError(
            f"--model {model}: needs blockplan.engine's Planner, which this build does not "
            f"have ({e}); use --model constant-velocity"
        ) from e


def load_planner(model: str, config: PlannerConfig) -> Planner:
    if model in BASELINES:
        return BASELINES[model]()
    if model == RANDOM_INIT or model.startswith(f"{RANDOM_INIT}:"):
        preset = model.partition(":")[2] or "tiny"
        return _engine_planner_class(model).random_init(preset, config)
    model_dir = resolve_model_dir(model)
    return _engine_planner_class(model).from_folder(model_dir, config)
