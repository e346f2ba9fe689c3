"""Our own simulated data is valid input: the expert's lane changes stay
drivable, so `blockplan simulate` bags replay without a single rejected input (they used to
start lane changes with a 3.4 g yaw-rate step the odometry check rightly flagged)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockplan.cli import main
from blockplan.runtime.ego import EgoHistory, OdometryResult
from blockplan.sim.episode import EGO_LAT, EGO_SPEED, EGO_YAW
from blockplan.sim.labels import ego_state
from blockplan.sim.scenarios import EXPERT_MAX_LATERAL_ACCEL
from tests.sim.conftest import short_episode


@pytest.mark.parametrize(
    "scenario,seed", [("highway", 0), ("highway", 1), ("merge", 2), ("roundabout", 1)]
)
def test_the_expert_drives_within_a_plausible_lateral_acceleration(scenario, seed) -> None:
    log = short_episode(scenario, seed, 8.0)
    yaw_rate = np.diff(log.ego[:, EGO_YAW]) / log.dt
    lateral = np.abs(log.ego[1:, EGO_SPEED] * yaw_rate)
    assert lateral.max() <= EXPERT_MAX_LATERAL_ACCEL * 1.05
    history = EgoHistory()
    results = [history.push(ego_state(log, i)) for i in range(log.num_steps)]
    assert set(results) == {OdometryResult.ACCEPTED}


def test_the_demo_bag_replays_without_invalid_inputs(tmp_path: Path, capsys) -> None:
    """The demo's scenario and seed: the ego changes lanes at 2.2 s."""
    bag = tmp_path / "sim.mcap"
    args = ["simulate", "--scenario", "highway", "--seed", "0", "--duration", "4"]
    assert main([*args, "--out", str(bag)]) == 0
    lateral = short_episode("highway", 0, 12.0).ego[:, EGO_LAT]
    assert np.ptp(lateral[: 4 * 20]) > 2.0  # a lane change within the bag
    out = tmp_path / "out"
    args = ["replay", str(bag), "--model", "constant-velocity", "--out", str(out)]
    assert main([*args, "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["invalid_inputs"] == 0, metrics["counters"]
    assert not any(n for k, n in metrics["counters"].items() if k.startswith("odometry_"))
