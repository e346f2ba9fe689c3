"""A small flow-head planner on random weights (the `test-flow` preset), one thread."""

from __future__ import annotations

import pytest
import torch

from blockplan.planner.parts import random_parts
from blockplan.planner.planner import Planner


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def flow_planner(num_rollouts: int = 3, **params) -> Planner:
    parts = random_parts("test-flow", seed=0)
    config = parts.config.with_params({"rollouts.num_rollouts": num_rollouts, **params})
    return Planner(parts.model, parts.tokenizer, config, parts.schema)


@pytest.fixture(scope="module")
def planner() -> Planner:
    return flow_planner()
