"""The lane guard: rollouts that move into a lane beside the map or the tracker closes are
dropped from the average; a plan left with none is rejected; without a report nothing
changes."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.config import GateConfig, LaneGuardConfig, TrajectoryOutputConfig
from blockplan.runtime import InvalidPlanError, plan_trajectory
from blockplan.runtime.lane_guard import closed_sides, guard_keeps, yaw_change_1s
from blockplan.types import EgoState, Observation
from tests.runtime.test_plans import _plan

INF, NAN = float("inf"), float("nan")
GUARD = LaneGuardConfig(enabled=True)  # off by default
OPEN = [[1.0, INF, NAN, INF, NAN], [1.0, INF, NAN, INF, NAN]]  # a lane each side, no cars


def _rollouts(*lateral_m: float) -> np.ndarray:
    """One rollout per final lateral offset: 20 m/s ahead, drifting sideways smoothly."""
    t = np.arange(1, 6, dtype=np.float64)
    return np.stack(
        [np.stack([20.0 * t, y * (t / 5.0) ** 2], axis=-1) for y in lateral_m]
    )  # (N, 5, 2)


def _observation(beside, lane_pose=None, yaw_1s_ago: float = 0.0) -> Observation:
    history = tuple(
        EgoState(10**9 - k * 500_000_000, -10.0 * k, 0.0, yaw_1s_ago * k / 2, 20.0)
        for k in (2, 1, 0)
    )
    return Observation(10**9, (), history, lane_pose=lane_pose, beside=beside)


def _process(rollouts, observation, guard=GUARD):
    return plan_trajectory(
        _plan(rollouts), TrajectoryOutputConfig(), GateConfig(), 0.0, None, observation, guard
    )


def test_a_rollout_into_a_car_beside_is_dropped_and_the_rest_averaged():
    rollouts = _rollouts(0.0, 0.3, 3.6, -0.2)  # the third changes lanes to the left
    car_left = [[1.0, 2.0, 20.0, INF, NAN], [1.0, INF, NAN, INF, NAN]]  # alongside, left
    processed = _process(rollouts, _observation(car_left))
    assert processed.guarded == 1
    assert abs(processed.trajectory.y).max() < 0.5  # the average of the three kept
    free = _process(rollouts, _observation(OPEN))  # an open lane: the change is kept
    assert free.guarded == 0 and free.trajectory.y.max() > 0.5
    # a car 30 m ahead in that lane leaves it open; one 3 m behind closes it
    for report, dropped in (
        ([[1.0, 30.0, 20.0, INF, NAN], OPEN[1]], 0),
        ([[1.0, INF, NAN, 3.0, 25.0], OPEN[1]], 1),
    ):
        assert _process(rollouts, _observation(report)).guarded == dropped


def test_no_lane_closes_a_side_only_on_a_straight_road():
    rollouts = _rollouts(-3.5)  # a change to the right, greedy (N = 1)
    rightmost = [[2.0, INF, NAN, INF, NAN], [0.0, INF, NAN, INF, NAN]]
    with pytest.raises(InvalidPlanError, match="lane guard.*right where the map has no lane"):
        _process(rollouts, _observation(rightmost))
    # the ego has been turning (a curve): the lane count says nothing, the plan stands
    assert _process(rollouts, _observation(rightmost, yaw_1s_ago=0.2)).guarded == 0
    # the lane pose moves the offset: 2 m left of the centre, the same plan ends 1.5 m right
    assert _process(rollouts, _observation(rightmost, lane_pose=(2.0, 0.0))).guarded == 0


def test_without_a_report_or_disabled_the_guard_changes_nothing():
    rollouts = _rollouts(0.0, 3.6, -3.6, 0.1)
    closed = [[0.0, 1.0, 20.0, 1.0, 20.0], [0.0, 1.0, 20.0, 1.0, 20.0]]
    plain = _process(rollouts, None, LaneGuardConfig(enabled=False))
    for observation, guard in (
        (_observation(None), GUARD),
        (_observation(closed), LaneGuardConfig(enabled=False)),
        (_observation([[NAN] * 5, [NAN] * 5]), GUARD),  # all unknown closes nothing
    ):
        processed = _process(rollouts, observation, guard)
        assert processed.guarded == 0
        np.testing.assert_array_equal(processed.trajectory.y, plain.trajectory.y)


def test_closed_sides_and_the_yaw_change():
    report = np.array([[0.0, INF, NAN, INF, NAN], [NAN, 4.0, 20.0, NAN, NAN]])
    assert closed_sides(report, GUARD) == ((False, True), (True, False))
    assert yaw_change_1s(_observation(None, yaw_1s_ago=0.3)) == pytest.approx(0.3)
    short = Observation(10**9, (), (EgoState(10**9, 0.0, 0.0, 0.0, 1.0),))
    assert yaw_change_1s(short) == INF  # no second of history: not known to be straight
    keep, why = guard_keeps([], _observation(OPEN), GUARD)
    assert keep.shape == (0,) and why == ""


def test_the_pass_rate_script_runs_the_runtime_guard_on_a_data_set(tmp_path, repo_root):
    """scripts/lane_guard_pass_rates.py: every sample through the published path's fit and
    the runtime's guard with the sample's observation; a constant-speed, straight expert
    never moves beside, so everything is kept."""
    import importlib.util

    from tests.train.conftest import write_dataset

    data = write_dataset(tmp_path / "data", {"train": [0, 1]})
    spec = importlib.util.spec_from_file_location(
        "lane_guard_pass_rates", repo_root / "scripts" / "lane_guard_pass_rates.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rates = script.pass_rates(data, "train", GUARD)
    assert rates == {
        "highway": {
            "samples": 8,
            "moves_beside": 0,
            "dropped_car": 0,
            "dropped_no_lane": 0,
            "kept_share": 1.0,
        }
    }
