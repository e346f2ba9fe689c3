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


def test_a_perturbation_pushes_the_expert_off_its_path_and_it_recovers() -> None:
    from blockplan.sim.episode import EGO_LAT, Perturbation

    scenario = get_scenario("highway")
    plain = run_episode(scenario, 3, 12.0)
    event = Perturbation(start_s=4.0, duration_s=0.8, steering_rad=0.06)
    pushed = run_episode(scenario, 3, 12.0, (event,))
    i = plain.index_at(4.0)
    # the same episode up to the step the perturbed action acts on, then not
    np.testing.assert_array_equal(pushed.ego[: i + 1], plain.ego[: i + 1])
    assert not np.array_equal(pushed.ego[i + 1], plain.ego[i + 1])
    assert plain.perturbed is None
    np.testing.assert_array_equal(np.flatnonzero(pushed.perturbed), np.arange(i, i + 16))
    off = np.abs(pushed.ego[:, EGO_LAT] - plain.ego[:, EGO_LAT])
    assert off[plain.index_at(5.0)] > 0.5  # pushed more than half a metre aside ...
    assert off[plain.index_at(9.0)] < 0.05  # ... and the expert steered back
    assert pushed.is_clean(0, i) and not pushed.is_clean(0, i + 1)
    assert pushed.is_clean(i + 16, pushed.num_steps)


def test_the_perturbation_schedule_is_reproducible_and_leaves_a_future() -> None:
    from blockplan.sim.episode import perturbation_schedule

    a = perturbation_schedule(7, 30.0, 6.0, 5.0)
    assert a == perturbation_schedule(7, 30.0, 6.0, 5.0) and a != perturbation_schedule(
        8, 30.0, 6.0, 5.0
    )
    assert len(a) >= 2
    for p, q in zip(a, a[1:], strict=False):
        assert q.start_s - (p.start_s + p.duration_s) >= 0.75 * 6.0 - 0.01
    assert all(0.4 <= p.duration_s <= 0.8 and 0.02 <= abs(p.steering_rad) <= 0.06 for p in a)
    assert a[-1].start_s + a[-1].duration_s + 5.0 <= 30.0
    assert perturbation_schedule(7, 5.5, 6.0, 5.0) == ()


def test_the_lane_pose_is_the_offset_from_the_own_lane_and_the_heading_error() -> None:
    """Highway lanes are straight, 4 m apart, centred at y = 0, -4, ... (REP-103), along +x:
    the recorded lane pose must be that geometry's offset and heading, through a lane change."""
    from blockplan.sim.episode import EGO_Y, EGO_YAW, Perturbation

    event = Perturbation(start_s=2.0, duration_s=0.8, steering_rad=0.06)
    log = run_episode(get_scenario("highway"), 3, 8.0, (event,))
    assert log.lane_pose.shape == (log.num_steps, 2)
    y = log.ego[:, EGO_Y]
    offset = y - np.round(y / 4.0) * 4.0
    # highway-env switches the lane a little past the half-way line (its closest-lane rule),
    # so compare where the ego is clearly inside one lane
    inside = np.abs(offset) < 1.8
    assert inside.mean() > 0.9
    np.testing.assert_allclose(log.lane_pose[inside, 0], offset[inside], atol=1e-6)
    np.testing.assert_allclose(log.lane_pose[:, 1], log.ego[:, EGO_YAW], atol=1e-6)
    assert np.abs(log.lane_pose[:, 0]).max() > 0.5  # the push moved it off the centre
