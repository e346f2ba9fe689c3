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
