"""Section-adaptive noising with complementary masks (docs/ALGORITHMS.md §1, §3).

Per sample and section s, a mask ratio t_s ~ Beta(α_s, β_s) (at least `MIN_MASK_RATIO`);
each maskable answer position of section s is masked with probability t_s. The second noisy
copy masks exactly the maskable positions the first left clean, so every maskable position
is a diffusion target once per step.

Maskable = editable and not the first position of its block: at decoding time a block's
first position is always known before the block's draft (structural, or picked from the
causal logit that closes the previous block), so the noisy stream never sees it masked; it
is learnt by the AR stream. Randomness comes from a numpy Generator the caller seeds from
(seed, step, rank), so a resumed run draws the same masks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blockplan.schema import SECTION_NAMES, Scaffold, section_index

# Beta(α, β) of each section's mask ratio: trajectory trains mostly at high noise.
SECTION_NOISE: dict[str, tuple[float, float]] = {
    "critical_objects": (1.0, 2.0),
    "explanation": (1.0, 1.0),
    "future_meta_behavior": (1.0, 1.5),
    "trajectory": (2.0, 1.0),
}
MIN_MASK_RATIO = 1e-3

# Cross-entropy weight of each section (both streams).
SECTION_WEIGHTS: dict[str, float] = {
    "critical_objects": 1.5,
    "explanation": 1.0,
    "future_meta_behavior": 2.0,
    "trajectory": 3.0,
}


@dataclass(frozen=True)
class NoiseLayout:
    """Per-position constants of one scaffold, all (A,).

    section: index into SECTION_NAMES. is_editable: a value slot (a training target).
    is_maskable: editable and not a block's first position. weight: the section's CE weight.
    """

    section: np.ndarray
    is_editable: np.ndarray
    is_maskable: np.ndarray
    weight: np.ndarray

    @classmethod
    def from_scaffold(cls, scaffold: Scaffold) -> NoiseLayout:
        section = section_index(scaffold)
        is_editable = np.asarray(scaffold.is_editable, dtype=bool)
        is_maskable = is_editable.copy()
        for block in scaffold.blocks:
            is_maskable[block.start] = False
        weight = np.array([SECTION_WEIGHTS[SECTION_NAMES[s]] for s in section])
        return cls(section, is_editable, is_maskable, weight)


def sample_mask_ratios(rng: np.random.Generator, batch_size: int) -> np.ndarray:
    """(B, num_sections) mask ratios t ~ Beta(α_s, β_s), clipped to [MIN_MASK_RATIO, 1]."""
    cols = [rng.beta(*SECTION_NOISE[name], size=batch_size) for name in SECTION_NAMES]
    return np.clip(np.stack(cols, axis=-1), MIN_MASK_RATIO, 1.0)


def complementary_masks(
    layout: NoiseLayout, ratios: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Two (B, A) bool masks: the first masks each maskable position with its section's
    ratio; the second masks exactly the maskable positions the first did not."""
    B, A = ratios.shape[0], len(layout.section)
    per_position = ratios[:, layout.section]  # (B, A)
    first = (rng.random((B, A)) < per_position) & layout.is_maskable
    second = layout.is_maskable & ~first
    return first, second


def apply_mask(answer_ids: np.ndarray, mask: np.ndarray, mask_id: int) -> np.ndarray:
    """(B, A) ids with the mask token where `mask`."""
    return np.where(mask, mask_id, answer_ids)
