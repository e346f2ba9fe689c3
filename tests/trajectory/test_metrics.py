"""Displacement metrics on the 4 Hz, 20-point protocol grid."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.trajectory import metrics

GT = np.stack([2.5 * np.arange(1, 21), np.zeros(20)], axis=-1)  # (20, 2)


def test_constant_offset():
    pred = GT + [3.0, 4.0]
    for value in (
        metrics.ade_3s(pred, GT),
        metrics.ade_5s(pred, GT),
        metrics.fde(pred, GT),
        metrics.l2_at_uniad(pred, GT, 2.0),
        metrics.l2_at_stp3(pred, GT, 2.0),
    ):
        assert value == pytest.approx(5.0)


def test_along_cross_splits_the_error_in_the_paths_own_frame():
    along, across = metrics.along_cross(GT + [3.0, 4.0], GT)  # the path runs along x
    np.testing.assert_allclose(along, 3.0)
    np.testing.assert_allclose(across, 4.0)
    left = GT[:, ::-1]  # the same path running along y (to the left)
    along, across = metrics.along_cross(left + [-4.0, 3.0], left)
    np.testing.assert_allclose(along, 3.0)
    np.testing.assert_allclose(across, 4.0)
    # A quarter circle of radius 20 m: a plan 1 m behind along the arc and 0.5 m outside it
    angle = np.linspace(0.05, np.pi / 2, 20)
    arc = 20.0 * np.stack([np.sin(angle), 1 - np.cos(angle)], -1)
    tangent = np.stack([np.cos(angle), np.sin(angle)], -1)
    normal = np.stack([-np.sin(angle), np.cos(angle)], -1)  # to the left
    along, across = metrics.along_cross(arc - 1.0 * tangent - 0.5 * normal, arc)
    np.testing.assert_allclose(along[1:-1], -1.0, atol=0.01)  # central differences
    np.testing.assert_allclose(across[1:-1], -0.5, atol=0.01)
    error = np.linalg.norm(arc - 1.0 * tangent - 0.5 * normal - arc, axis=-1)
    np.testing.assert_allclose(along**2 + across**2, error**2)


def test_along_cross_of_a_path_that_stands_still_keeps_its_last_direction():
    stopped = np.concatenate([GT[:10], np.repeat(GT[9:10], 10, axis=0)])  # stops after 2.5 s
    along, across = metrics.along_cross(stopped + [2.0, 0.0], stopped)
    np.testing.assert_allclose(along, 2.0)
    np.testing.assert_allclose(across, 0.0)
    parked = np.zeros((20, 2))  # never moves: the ego's x axis
    along, across = metrics.along_cross(parked + [0.0, -1.0], parked)
    np.testing.assert_allclose(along, 0.0)
    np.testing.assert_allclose(across, -1.0)


def test_growing_error_separates_the_conventions():
    errors = 0.1 * np.arange(1, 21)  # error at t = 0.25 k is 0.1 k
    pred = GT + np.stack([errors, np.zeros(20)], axis=-1)
    assert metrics.l2_at_uniad(pred, GT, 1.0) == pytest.approx(0.4)
    assert metrics.l2_at_stp3(pred, GT, 1.0) == pytest.approx(0.25)
    assert metrics.l2_at_uniad(pred, GT, 3.0) == pytest.approx(1.2)
    assert metrics.l2_at_stp3(pred, GT, 3.0) == pytest.approx(0.65)
    assert metrics.ade_3s(pred, GT) == pytest.approx(0.65)
    assert metrics.ade_5s(pred, GT) == pytest.approx(1.05)
    assert metrics.fde(pred, GT) == pytest.approx(2.0)
    assert metrics.ade(pred, GT, 4) == pytest.approx(0.25)


def test_summary_names_every_convention():
    errors = 0.1 * np.arange(1, 21)
    pred = GT + np.stack([np.zeros(20), errors], axis=-1)
    summary = metrics.displacement_summary(pred, GT)
    assert set(summary) == {
        "ade_3s",
        "ade_5s",
        "fde",
        *(f"l2_{t}s_{c}" for t in (1, 2, 3) for c in ("uniad", "stp3")),
    }
    assert summary["l2_2s_uniad"] == pytest.approx(0.8)
    assert summary["l2_2s_stp3"] == pytest.approx(0.45)
    assert all(isinstance(v, float) for v in summary.values())


def test_min_ade_k_takes_the_best_prediction():
    preds = np.stack([GT + [0.0, 2.0], GT + [0.0, 0.5], GT - [1.0, 0.0]])
    assert metrics.min_ade_k(preds, GT) == pytest.approx(0.5)
    assert metrics.min_ade_k(preds[:1], GT) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: metrics.ade_5s(GT[:12], GT), "shape"),
        (lambda: metrics.ade_5s(GT[:12], GT[:12]), "num_points"),
        (lambda: metrics.l2_at_uniad(GT, GT, 1.1), "multiple of 0.25"),
        (lambda: metrics.l2_at_stp3(GT, GT, 6.0), "beyond"),
        (lambda: metrics.min_ade_k(GT, GT), r"\(K, P, 2\)"),
        (lambda: metrics.fde(GT[:, :1], GT[:, :1]), r"\(P, 2\)"),
    ],
)
def test_bad_inputs_are_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()
