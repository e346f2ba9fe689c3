"""The simulator expert's own futures through the published path's fit pass the hard validity
gates (docs/BENCHMARKS.md "Validity gates" holds the calibration on the test split of the
training data set, 300-425 samples per scenario; this is a short regression guard on one
episode each)."""

from __future__ import annotations

import pytest

from blockplan.config import GateConfig, TrajectoryOutputConfig
from blockplan.sim.dataset import forward_times
from blockplan.sim.labels import label_at, label_times
from blockplan.trajectory import check_gates, smooth_upsample
from tests.sim.conftest import short_episode

SEEDS = {"highway": 3, "merge": 3, "roundabout": 3, "intersection": 5}


@pytest.mark.parametrize("scenario", sorted(SEEDS))
def test_expert_futures_pass_the_hard_gates(scenario):
    log = short_episode(scenario, SEEDS[scenario], 14.0)
    if log.crashed_at is not None:
        pytest.skip(f"{scenario} seed {SEEDS[scenario]}: the expert crashed")
    times = forward_times(log, label_times(log, 0.5, start_s=3.0))
    assert len(times) >= 5
    tolerance = TrajectoryOutputConfig().waypoint_tolerance_m
    hard = 0
    for t0 in times:
        waypoints = label_at(log, float(t0)).answer.waypoints
        hard += check_gates(smooth_upsample(waypoints, tolerance), GateConfig()).ok
    # >= 99 % over a test split (BENCHMARKS); one 14 s episode may hold one of the few
    # samples beyond a hard limit (roundabout seed 3: 2 of 13, the fit's yaw rate at an exit).
    # The old single set of gates rejected up to 60 % of such samples.
    assert hard >= 0.8 * len(times), f"{len(times) - hard} of {len(times)} rejected"
