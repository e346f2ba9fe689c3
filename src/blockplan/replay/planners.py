"""Which planner a replay runs: a model folder (blockplan.engine.Planner) or a named
baseline."""

from __future__ import annotations

import importlib
from pathlib import Path

from blockplan.config import PlannerConfig, package_root
from blockplan.replay.topics import ReplayInputError
from blockplan.runtime import ConstantVelocityPlanner, Planner

BASELINES = {"constant-velocity": ConstantVelocityPlanner}


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
        f"baselines: {sorted(BASELINES)}"
    )


def load_planner(model: str, config: PlannerConfig) -> Planner:
    if model in BASELINES:
        return BASELINES[model]()
    model_dir = resolve_model_dir(model)
    try:
        engine = importlib.import_module("blockplan.engine")
        planner_cls = engine.Planner
    except (ImportError, AttributeError) as e:
        raise ReplayInputError(
            f"--model {model_dir}: model folders need blockplan.engine.Planner, which this "
            f"build does not have ({e}); use --model constant-velocity"
        ) from e
    return planner_cls.from_pretrained(model_dir, config)
