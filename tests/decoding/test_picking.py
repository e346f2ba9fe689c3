"""The sampling picker's shortcuts draw exactly the ids of the plain computation: the
batched comparison count of `inverse_cdf` over the full row (the rule every shortcut must
reproduce, NaN rows included)."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.decoding.picking import inverse_cdf, inverse_cdf_among


def batched(row: np.ndarray, u: np.float64) -> int:
    """The reference: one row through the batched (2-D) path."""
    return int(inverse_cdf(row[None], np.asarray([u], dtype=np.float64))[0])


def random_rows(seed: int, n: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        V = int(rng.integers(2, 80))
        scaled = rng.normal(size=V) * rng.choice([0.1, 1.0, 10.0, 100.0])
        if rng.random() < 0.2:
            scaled[rng.integers(0, V, 3)] = -np.inf
        if rng.random() < 0.03:
            scaled[rng.integers(0, V)] = np.inf  # a NaN cdf
        allowed = rng.random(V) < rng.choice([0.05, 0.3, 0.9, 1.0])
        if rng.random() < 0.03:
            allowed[:] = False
        u = np.float64(rng.choice([rng.random(), 0.0, np.nextafter(1.0, 0.0)]))
        yield scaled, allowed, u


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_inverse_cdf_among_allowed_ids_is_the_full_draw():
    """Drawing among the allowed ids only equals drawing from the full row with the other
    ids at -inf: random rows and scales, -inf and +inf logits, sparse / full / empty
    allowed sets, the extreme uniforms (0 and the largest below 1)."""
    for scaled, allowed, u in random_rows(7, 5000):
        want = batched(np.where(allowed, scaled, -np.inf), u)
        assert inverse_cdf_among(scaled, np.flatnonzero(allowed), u) == want


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_inverse_cdf_one_row_is_the_batched_draw():
    """The 1-D binary search gives the batched comparison count's id, NaN rows included."""
    for scaled, allowed, u in random_rows(3, 3000):
        row = np.where(allowed, scaled, -np.inf)
        assert int(inverse_cdf(row, u)) == batched(row, u)
