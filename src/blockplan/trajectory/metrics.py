"""Open-loop displacement metrics (docs/ALGORITHMS.md §9).

Every function takes trajectories as (P, 2) positions sampled at 4 Hz from t = 0.25 s (the
WOD-E2E protocol: P = 20 points up to 5 s, JMT-upsampled with `upsample`), so the point at
t seconds is index 4 t − 1. Predicted and ground-truth arrays must have the same shape.

* `ade_3s`, `ade_5s`: mean L2 over the first 12 / 20 points (WOD-E2E ADE@3s / ADE@5s).
* `fde`: L2 at the last point.
* `l2_at_uniad(t)`: L2 at time t (UniAD's convention for nuScenes L2@t).
* `l2_at_stp3(t)`: mean of the L2 of every point up to and including t (ST-P3's convention).
  The two differ: never compare numbers across conventions.
* `min_ade_k`: the smallest ADE over K predictions (minADE_K).
* `along_cross`: each point's error split along the ground-truth path (ahead / behind: a
  speed error) and across it (beside: a path error).
* `displacement_summary`: all of the above for one prediction, as a JSON-ready dict.
"""

from __future__ import annotations

import math

import numpy as np

POINTS_PER_SECOND = 4  # the 4 Hz protocol grid: t = 0.25, 0.5, …
NUM_POINTS_3S = 3 * POINTS_PER_SECOND
NUM_POINTS_5S = 5 * POINTS_PER_SECOND


def _check_pair(pred: np.ndarray, gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(pred, dtype=np.float64)
    gt = np.asarray(gt, dtype=np.float64)
    if pred.ndim != 2 or pred.shape[-1] != 2:
        raise ValueError(f"pred must be (P, 2), got {pred.shape}")
    if gt.shape != pred.shape:
        raise ValueError(f"gt must have pred's shape {pred.shape}, got {gt.shape}")
    return pred, gt


def displacement(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """(P,) L2 distance between predicted and ground-truth points."""
    pred, gt = _check_pair(pred, gt)
    return np.linalg.norm(pred - gt, axis=-1)


def ade(pred: np.ndarray, gt: np.ndarray, num_points: int | None = None) -> float:
    """Mean L2 over the first `num_points` points (all points if None)."""
    errors = displacement(pred, gt)
    num_points = len(errors) if num_points is None else num_points
    if not 1 <= num_points <= len(errors):
        raise ValueError(f"num_points={num_points}: must be in [1, {len(errors)}]")
    return float(errors[:num_points].mean())


def ade_3s(pred: np.ndarray, gt: np.ndarray) -> float:
    """WOD-E2E ADE@3s: mean L2 over the first 12 points of the 4 Hz trajectory."""
    return ade(pred, gt, NUM_POINTS_3S)


def ade_5s(pred: np.ndarray, gt: np.ndarray) -> float:
    """WOD-E2E ADE@5s: mean L2 over the first 20 points of the 4 Hz trajectory."""
    return ade(pred, gt, NUM_POINTS_5S)


def along_cross(
    pred: np.ndarray, gt: np.ndarray, min_step_m: float = 1e-3
) -> tuple[np.ndarray, np.ndarray]:
    """(P,) along-track and (P,) cross-track components of each point's error pred - gt in
    the ground-truth path's own direction at that point (its tangent from the origin, the
    ego at t0, through the points; positive along: the prediction runs ahead, positive
    across: it lies to the left). Where the path stands still (steps under `min_step_m`) the
    last direction it moved in is used, and the ego's x axis before it moved at all. The
    two components' squares sum to the squared L2 error."""
    pred, gt = _check_pair(pred, gt)
    path = np.concatenate([np.zeros((1, 2)), gt])  # (P+1, 2): from the ego at t0
    tangent = np.gradient(path, axis=0)[1:]  # (P, 2) central differences, one-sided at the end
    direction = np.array([1.0, 0.0])
    unit = np.empty_like(tangent)
    for k, step in enumerate(tangent):
        length = float(np.hypot(*step))
        if length >= min_step_m:
            direction = step / length
        unit[k] = direction
    error = pred - gt
    along = (error * unit).sum(-1)
    across = unit[:, 0] * error[:, 1] - unit[:, 1] * error[:, 0]
    return along, across


def fde(pred: np.ndarray, gt: np.ndarray) -> float:
    """L2 at the last point."""
    return float(displacement(pred, gt)[-1])


def _num_points_up_to(seconds: float, available: int) -> int:
    count = seconds * POINTS_PER_SECOND
    if not (math.isfinite(count) and abs(count - round(count)) < 1e-9 and round(count) >= 1):
        raise ValueError(f"seconds={seconds!r}: must be a positive multiple of 0.25 s")
    if round(count) > available:
        raise ValueError(f"seconds={seconds!r}: beyond the trajectory ({available} points)")
    return int(round(count))


def l2_at_uniad(pred: np.ndarray, gt: np.ndarray, seconds: float) -> float:
    """UniAD convention: the L2 error of the point at `seconds`."""
    errors = displacement(pred, gt)
    return float(errors[_num_points_up_to(seconds, len(errors)) - 1])


def l2_at_stp3(pred: np.ndarray, gt: np.ndarray, seconds: float) -> float:
    """ST-P3 convention: the mean L2 error of every point from 0.25 s up to `seconds`."""
    errors = displacement(pred, gt)
    return float(errors[: _num_points_up_to(seconds, len(errors))].mean())


def min_ade_k(preds: np.ndarray, gt: np.ndarray, num_points: int | None = None) -> float:
    """minADE_K: the smallest ADE (over the first `num_points`, default all) of K predictions
    (K, P, 2) against one ground truth (P, 2)."""
    preds = np.asarray(preds, dtype=np.float64)
    if preds.ndim != 3 or preds.shape[0] < 1:
        raise ValueError(f"preds must be (K, P, 2) with K >= 1, got {preds.shape}")
    return min(ade(p, gt, num_points) for p in preds)


def displacement_summary(
    pred: np.ndarray, gt: np.ndarray, seconds: tuple[float, ...] = (1.0, 2.0, 3.0)
) -> dict[str, float]:
    """ade_3s, ade_5s, fde and l2_{t}s_uniad / l2_{t}s_stp3 for each t in `seconds`, for a
    20-point (5 s) prediction; the keys name the convention."""
    out = {"ade_3s": ade_3s(pred, gt), "ade_5s": ade_5s(pred, gt), "fde": fde(pred, gt)}
    for t in seconds:
        out[f"l2_{t:g}s_uniad"] = l2_at_uniad(pred, gt, t)
        out[f"l2_{t:g}s_stp3"] = l2_at_stp3(pred, gt, t)
    return out
