"""The route a simulated router publishes goes where the expert drives, and every data set
sample records what the planner reads of it at t0."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.sim.dataset import DatasetOptions, episode_samples, shard_route_ahead
from blockplan.sim.episode import EGO_X, EGO_Y, EGO_YAW
from blockplan.sim.labels import log_route_ahead
from blockplan.sim.rig import load_rig
from blockplan.sim.route_path import PATH_AHEAD_M, PATH_STEP_M
from blockplan.trajectory import Pose2D
from blockplan.types import ROUTE_AHEAD_M
from tests.sim.conftest import short_episode


def _driven_errors(log, upto_m: float = 30.0) -> np.ndarray:
    """Distances between the route ahead at each second and where the expert then is once it
    has driven as far along (ego frame at t0), for the points up to `upto_m`."""
    ego = log.ego[:, [EGO_X, EGO_Y, EGO_YAW]]
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(ego[:, :2], axis=0), axis=1))])
    errors = []
    for i in range(0, len(log.t), 20):
        points = log_route_ahead(log, i)
        assert np.isfinite(points).all()
        pose = Pose2D(*ego[i])
        for d, point in zip(ROUTE_AHEAD_M, points, strict=True):
            j = int(np.searchsorted(arc, arc[i] + d))
            if d > upto_m or j >= len(arc):
                continue
            there = pose.inverse().transform_points(ego[j, :2][None])[0]
            errors.append(float(np.linalg.norm(there - point)))
    return np.asarray(errors)


@pytest.mark.parametrize(
    ("scenario", "seed"),
    [
        ("roundabout", 0),
        ("roundabout", 3),  # leaves the ring where the simulator puts the ego on the ring road
        ("intersection", 1),
        ("merge", 0),
    ],
)
def test_the_route_ahead_is_where_the_expert_drives(scenario, seed):
    """Through the roundabout's S-curve entry, its ring and exit, and an intersection's turn,
    the route ahead 5-30 m is within a lane of where the expert then is (a lane change in
    the ring moves it by one), and mostly within a metre."""
    log = short_episode(scenario, seed, 16.0)
    errors = _driven_errors(log)
    assert len(errors) > 20
    assert errors.max() < 5.0
    assert np.median(errors) < 1.0


def test_the_route_covers_what_the_planner_reads():
    """The path runs far enough ahead that every point the planner reads is on it, not
    extrapolated past its end, and is in odom (REP-103) like the ego's pose."""
    log = short_episode("roundabout", 0, 16.0)
    assert max(ROUTE_AHEAD_M) + 30.0 <= PATH_AHEAD_M  # 1 s at 30 m/s after it was sent
    for i in range(0, len(log.t), 40):
        path = log.route_path[i]
        steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
        # a point every PATH_STEP_M of the lane's own station (a sine lane's wiggle, a ring
        # lane's station on another radius: within 20 %)
        assert (steps > 0.8 * PATH_STEP_M).all() and (steps < 1.2 * PATH_STEP_M).all()
        nearest = np.linalg.norm(path - log.ego[i, [EGO_X, EGO_Y]], axis=1).min()
        assert nearest < 2.5  # the ego is on its lane's centre line, give or take


def test_every_sample_records_the_route_ahead_at_its_instant():
    log = short_episode("intersection", 1, 16.0)
    options = DatasetOptions(scenarios=("intersection",), episodes=1, duration_s=16.0)
    arrays, _ = episode_samples(log, load_rig(), options)
    n = len(arrays["stamp_ns"])
    assert arrays["route_ahead"].shape == (n, len(ROUTE_AHEAD_M), 2)
    for k, stamp in enumerate(arrays["stamp_ns"]):
        want = log_route_ahead(log, log.index_at(stamp / 1e9))
        np.testing.assert_allclose(arrays["route_ahead"][k], want, atol=1e-4)
    np.testing.assert_array_equal(shard_route_ahead(arrays), arrays["route_ahead"])
    older = {k: v for k, v in arrays.items() if k != "route_ahead"}  # a shard from before it
    assert np.isnan(shard_route_ahead(older)).all()
