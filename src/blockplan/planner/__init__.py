"""Building a `Planner`: its parts from a model folder or a preset (`parts.py`, `qwen.py` for
Qwen2.5-VL checkpoints), the embodiment's answer format (`embodiment.py`), synthetic inputs
(`synthetic.py`), and what the node and replay load by name (`loading.py`).

planner = Planner.from_folder("models/blockplan-tiny", config)   # or Planner.random_init
plan = planner.plan(observation)                                 # strategy from config

`Planner` and its errors are imported on first use, so `blockplan.planner.loading` (which
also serves the torch-free constant-velocity baseline) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blockplan.planner.planner import DecodedPlan, Planner, PlannerSetupError

__all__ = ["DecodedPlan", "Planner", "PlannerSetupError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("blockplan.planner.planner"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
