"""The sampling picker's shortcuts draw exactly the ids of the plain computation."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.decoding.picking import inverse_cdf, inverse_cdf_among


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_inverse_cdf_among_allowed_ids_is_the_full_draw():
    """Drawing among the allowed ids only equals drawing from the full row with the other
    ids at -inf: random rows, scales, -inf logits, sparse / full / empty allowed sets and
    the extreme uniforms (0 and the largest below 1)."""
    rng = np.random.default_rng(7)
    for _ in range(5000):
        V = int(rng.integers(2, 80))
        scaled = rng.normal(size=V) * rng.choice([0.1, 1.0, 10.0, 100.0])
        if rng.random() < 0.2:
            scaled[rng.integers(0, V, 3)] = -np.inf
        allowed = rng.random(V) < rng.choice([0.05, 0.3, 0.9, 1.0])
        if rng.random() < 0.02:
            allowed[:] = False
        u = np.float64(rng.choice([rng.random(), 0.0, np.nextafter(1.0, 0.0)]))
        full = int(inverse_cdf(np.where(allowed, scaled, -np.inf), u))
        assert inverse_cdf_among(scaled, np.flatnonzero(allowed), u) == full


def test_inverse_cdf_one_row_matches_the_batched_rows():
    """The 1-D binary search gives the ids of the batched comparison-count."""
    rng = np.random.default_rng(3)
    scaled = rng.normal(size=(64, 50)) * 3.0
    u = rng.random(64)
    batched = inverse_cdf(scaled, u)
    assert [int(inverse_cdf(scaled[i], u[i])) for i in range(64)] == batched.tolist()
