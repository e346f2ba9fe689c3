from __future__ import annotations

import numpy as np
import pytest

from blockplan.sim.episode import run_episode
from blockplan.sim.scenarios import ScenarioError, get_scenario


def test_same_seed_same_episode() -> None:
    a = run_episode(get_scenario("merge"), 5, 1.0)
    b = run_episode(get_scenario("merge"), 5, 1.0)
    assert np.array_equal(a.ego, b.ego) and np.array_equal(a.boxes, b.boxes)
    assert a.num_steps == 21 and a.crashed_at is None


def test_duration_beyond_the_road_is_refused() -> None:
    with pytest.raises(ScenarioError, match="roundabout"):
        run_episode(get_scenario("roundabout"), 0, 100.0)


@pytest.mark.slow
def test_expert_crashes_are_detected() -> None:
    """The IDM expert sometimes collides at the intersection; the log says when and stops."""
    logs = [run_episode(get_scenario("intersection"), seed, 12.0) for seed in range(10)]
    crashed = [log for log in logs if log.crashed_at is not None]
    assert crashed, "expected at least one expert crash in 10 intersection seeds"
    for log in crashed:
        assert log.duration <= max(log.crashed_at, 0.0) + 1e-9
