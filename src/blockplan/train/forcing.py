"""Noise for the robot recipe (docs/ALGORITHMS.md §8): plain masked diffusion for the teacher,
diffusion forcing for the student.

* plain: one mask ratio t ~ U(MIN_MASK_RATIO, 1) per sample for the whole chunk;
* diffusion forcing: one ratio per block, drawn as the sorted values of as many independent
  U(MIN_MASK_RATIO, 1) draws — so per sample the ratios increase monotonically with the block
  index (later blocks are noisier), and where the increase happens is random.

With `full_share` > 0 that share of the samples is masked whole instead (all ratios 1).

Each maskable position (an editable value) of a block is masked with its block's ratio; a
sample whose draw masked nothing gets one random maskable position masked, so every sample
has a target. Randomness comes from a numpy Generator the caller seeds from (seed, phase,
step), so a rerun draws the same masks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blockplan.schema import Scaffold
from blockplan.train.noising import MIN_MASK_RATIO


@dataclass(frozen=True)
class ChunkNoiseLayout:
    """Per-position constants of one action scaffold, all (A,): the block index and whether
    the position is a maskable value."""

    block: np.ndarray
    is_maskable: np.ndarray
    num_blocks: int

    @classmethod
    def from_scaffold(cls, scaffold: Scaffold) -> ChunkNoiseLayout:
        block = np.empty(len(scaffold), dtype=np.int64)
        for k, b in enumerate(scaffold.blocks):
            block[b.start : b.end] = k
        is_maskable = np.asarray(scaffold.is_editable, dtype=bool).copy()
        for b in scaffold.blocks:
            is_maskable[b.start] = False  # never editable in an action scaffold; kept general
        return cls(block, is_maskable, len(scaffold.blocks))


def plain_ratios(rng: np.random.Generator, batch_size: int, num_blocks: int) -> np.ndarray:
    """(B, num_blocks): one U(MIN_MASK_RATIO, 1) ratio per sample, the same in every block."""
    t = rng.uniform(MIN_MASK_RATIO, 1.0, size=(batch_size, 1))
    return np.repeat(t, num_blocks, axis=1)


def forcing_ratios(rng: np.random.Generator, batch_size: int, num_blocks: int) -> np.ndarray:
    """(B, num_blocks): per sample, sorted U(MIN_MASK_RATIO, 1) draws — non-decreasing in the
    block index (diffusion forcing)."""
    return np.sort(rng.uniform(MIN_MASK_RATIO, 1.0, size=(batch_size, num_blocks)), axis=1)


def chunk_masks(
    layout: ChunkNoiseLayout, ratios: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """(B, A) bool: maskable position a masked with probability ratios[:, block[a]]; at least
    one masked position per sample."""
    B, A = ratios.shape[0], len(layout.block)
    masks = (rng.random((B, A)) < ratios[:, layout.block]) & layout.is_maskable
    maskable = np.flatnonzero(layout.is_maskable)
    for b in np.flatnonzero(~masks.any(axis=1)):
        masks[b, rng.choice(maskable)] = True
    return masks


def draw_chunk_noise(
    layout: ChunkNoiseLayout,
    answer_ids: np.ndarray,
    mask_id: int,
    rng: np.random.Generator,
    forcing: bool,
    full_share: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy ids and masks (B, A) for answers (B, A): diffusion forcing or plain noise.
    `full_share`: each sample is instead masked whole with this probability (the state
    every decode starts from: the first values come from the context alone)."""
    draw = forcing_ratios if forcing else plain_ratios
    ratios = draw(rng, answer_ids.shape[0], layout.num_blocks)
    if full_share > 0:  # no extra draw without it: earlier runs' masks stay as they were
        ratios[rng.random(answer_ids.shape[0]) < full_share] = 1.0
    masks = chunk_masks(layout, ratios, rng)
    return np.where(masks, mask_id, answer_ids), masks
