from __future__ import annotations

import numpy as np
import pytest

from blockplan.sim.episode import EpisodeLog
from blockplan.sim.explain import MAX_WORDS
from blockplan.sim.labels import LabelError, label_at, label_times
from blockplan.sim.roadmap import RoadMap
from blockplan.sim.world import KIND_VEHICLE, Box
from blockplan.types import Lateral, Longitudinal

DT = 0.05


def _log(ego_xy, speed, yaw=None, lat=None, others=()) -> EpisodeLog:
    """A hand-made log on a straight road along +x; lane 0's centre is y = 0."""
    n = len(speed)
    ego = np.zeros((n, 6))
    ego[:, :2] = ego_xy
    ego[:, 2] = 0.0 if yaw is None else yaw
    ego[:, 3] = speed
    ego[:, 4] = np.gradient(speed, DT)
    ego[:, 5] = ego_xy[:, 1] if lat is None else lat
    boxes = np.zeros((n, max(len(others), 1), 4))
    present = np.zeros((n, max(len(others), 1)), dtype=bool)
    static = []
    for j, (xy, v) in enumerate(others):
        boxes[:, j, :2], boxes[:, j, 3] = xy, v
        present[:, j] = True
        static.append(Box(j, KIND_VEHICLE, 0, 0, 0, 0, 5.0, 2.0, 1.5, (200, 0, 0)))
    return EpisodeLog(
        scenario="synthetic",
        seed=0,
        dt=DT,
        t=np.arange(n) * DT,
        ego=ego,
        ego_lane=[("a", "b", 0)] * n,
        ego_in_junction=np.zeros(n, bool),
        boxes=boxes,
        present=present,
        box_static=static,
        road=RoadMap(lanes=()),
        crashed_at=None,
    )


def test_constant_speed_waypoints_are_the_future_positions() -> None:
    t = np.arange(0, 8.0 + 1e-9, DT)
    log = _log(np.stack([20.0 * t, np.zeros_like(t)], -1), np.full(len(t), 20.0))
    label = label_at(log, 1.0)
    assert np.allclose(label.answer.waypoints, [[20, 0], [40, 0], [60, 0], [80, 0], [100, 0]])
    assert label.future_xy.shape == (20, 2) and np.allclose(label.future_t[[0, -1]], [0.25, 5])
    assert label.answer.longitudinal == Longitudinal.KEEP
    assert label.answer.lateral == Lateral.LANE_FOLLOW
    assert len(label.history) == 7 and label.history[-1].stamp_ns == label.stamp_ns
    assert not any(label.answer.critical_objects.values())
    assert len(label.answer.explanation.split()) <= MAX_WORDS


def test_waypoints_are_in_the_ego_frame() -> None:
    t = np.arange(0, 8.0 + 1e-9, DT)  # driving north (+y) at 10 m/s: ego x is odom +y
    log = _log(
        np.stack([np.full_like(t, 5.0), 10.0 * t], -1),
        np.full(len(t), 10.0),
        yaw=np.pi / 2,
        lat=np.zeros_like(t),
    )
    assert np.allclose(label_at(log, 0.0).answer.waypoints[:, 0], [10, 20, 30, 40, 50])
    assert np.allclose(label_at(log, 0.0).answer.waypoints[:, 1], 0, atol=1e-9)


@pytest.mark.parametrize(
    "direction, expected", [(1, Lateral.LANE_CHANGE_LEFT), (-1, Lateral.LANE_CHANGE_RIGHT)]
)
def test_lane_change_is_labelled_by_its_direction(direction, expected) -> None:
    t = np.arange(0, 8.0 + 1e-9, DT)
    y = direction * 4.0 * np.clip((t - 1.0) / 3.0, 0, 1)  # one lane (4 m) over 3 s
    log = _log(np.stack([25.0 * t, y], -1), np.full(len(t), 25.0))
    label = label_at(log, 0.5)
    assert label.answer.lateral == expected
    assert np.sign(label.answer.waypoints[-1, 1]) == direction


def test_braking_behind_a_slower_lead_is_decelerate() -> None:
    t = np.arange(0, 8.0 + 1e-9, DT)
    speed = np.maximum(25.0 - 2.5 * t, 15.0)  # brakes from 25 to 15 m/s
    x = np.concatenate([[0.0], np.cumsum(speed[:-1] * DT)])
    lead = np.stack([30.0 + 15.0 * t, np.zeros_like(t)], -1)
    log = _log(np.stack([x, np.zeros_like(t)], -1), speed, others=[(lead, 15.0)])
    label = label_at(log, 0.0)
    assert label.answer.longitudinal == Longitudinal.DECELERATE
    assert label.answer.critical_objects["nearby_vehicle"]
    assert not label.answer.critical_objects["conflicting_vehicle"]  # it is simply ahead
    assert "30 m" in label.answer.explanation
    assert label.facts["lead_gap_m"] == pytest.approx(30.0)


def test_cut_in_is_a_conflicting_vehicle() -> None:
    t = np.arange(0, 8.0 + 1e-9, DT)
    cut_y = 4.0 * (1 - np.clip((t - 0.5) / 2.0, 0, 1))  # from the left lane into ours
    other = np.stack([15.0 + 20.0 * t, cut_y], -1)
    log = _log(
        np.stack([20.0 * t, np.zeros_like(t)], -1), np.full(len(t), 20.0), others=[(other, 20.0)]
    )
    label = label_at(log, 0.0)
    assert label.answer.critical_objects["conflicting_vehicle"]
    assert label.facts["conflict"] == "merging_left"


def test_label_needs_five_seconds_of_future() -> None:
    t = np.arange(0, 6.0 + 1e-9, DT)
    log = _log(np.stack([t, 0 * t], -1), np.ones(len(t)))
    assert np.allclose(label_times(log, 0.5), [0.0, 0.5, 1.0])
    with pytest.raises(LabelError, match="t0=2"):
        label_at(log, 2.0)


def test_explanations_vary_and_stay_short(highway_log) -> None:
    texts = {label_at(highway_log, t).answer.explanation for t in label_times(highway_log, 0.25)}
    assert len(texts) >= 3
    assert all(len(x.split()) <= MAX_WORDS for x in texts)


def test_simulated_lane_changes_and_braking_agree_with_the_motion(highway_log) -> None:
    """In a real highway episode (seed 0 changes lanes left twice), every meta label agrees
    with the expert's recorded motion."""
    labels = [label_at(highway_log, t) for t in label_times(highway_log, 0.25)]
    lateral = [lab.answer.lateral for lab in labels]
    assert Lateral.LANE_CHANGE_LEFT in lateral
    for lab in labels:
        a, v0 = lab.answer, lab.history[-1].v_x
        # the highway runs along odom +x, so odom y is the road-relative lateral position
        # (the ego-frame y of the last waypoint is not: mid-manoeuvre the ego heading is
        # turned, and 100 m ahead a few degrees are metres)
        i0, i5 = highway_log.index_at(lab.t0), highway_log.index_at(lab.t0 + 5.0)
        dy = highway_log.ego[i5, 1] - highway_log.ego[i0, 1]
        if a.lateral == Lateral.LANE_CHANGE_LEFT:
            assert dy > 1.5
        if a.lateral == Lateral.LANE_CHANGE_RIGHT:
            assert dy < -1.5
        if a.lateral == Lateral.LANE_FOLLOW:
            assert abs(dy) < 2.5
        v3 = lab.future_speed[11]  # t0 + 3 s
        if a.longitudinal == Longitudinal.DECELERATE:
            assert v3 < v0 - 0.9
        if a.longitudinal == Longitudinal.ACCELERATE:
            assert v3 > v0 + 0.9
