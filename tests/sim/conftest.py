"""Shared fixtures: one short recorded episode per scenario, simulated once per session."""

from __future__ import annotations

import pytest

from tests.optional import importorskip

importorskip("highway_env")

from blockplan.sim.episode import EpisodeLog, run_episode
from blockplan.sim.scenarios import get_scenario

_CACHE: dict[tuple[str, int, float], EpisodeLog] = {}


def short_episode(name: str, seed: int = 1, duration_s: float = 8.0) -> EpisodeLog:
    key = (name, seed, duration_s)
    if key not in _CACHE:
        _CACHE[key] = run_episode(get_scenario(name), seed, duration_s)
    return _CACHE[key]


@pytest.fixture(scope="session")
def highway_log() -> EpisodeLog:
    return short_episode("highway", 0, 12.0)
