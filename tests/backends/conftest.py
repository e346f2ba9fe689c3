from __future__ import annotations

import dataclasses

import pytest
import torch

from blockplan.config import PlannerConfig


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def with_backend(config: PlannerConfig, backend: str, num_rollouts: int = 3) -> PlannerConfig:
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, backend=backend, num_threads=1),
        rollouts=dataclasses.replace(config.rollouts, num_rollouts=num_rollouts),
    )
