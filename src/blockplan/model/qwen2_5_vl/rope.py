"""Multimodal RoPE positions of a prompt (HF `Qwen2_5_VLModel.get_rope_index`, images).

Text tokens count up one by one, equal on the three axes (t, h, w). An image of g_h × g_w
merged tokens that starts when the running position is c gets t = c, h = c + row,
w = c + col for each token (row-major); the text after it resumes at c + max(g_h, g_w).
So the answer's positions do not equal its token index: they continue from the prompt's
`next_position`, which the engine adds to every answer slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MropePositions:
    """positions (3, P) of the prompt tokens; next_position: the position of the token after
    the prompt (max + 1)."""

    positions: torch.Tensor
    next_position: int


def mrope_positions(
    length: int,
    image_spans: Sequence[tuple[int, int]],  # [start, end) of each image's tokens, in order
    grids: Sequence[tuple[int, int]],  # merged (g_h, g_w) of each image
) -> MropePositions:
    out = torch.empty(3, length, dtype=torch.long)
    cursor, position = 0, 0
    for (start, end), (gh, gw) in zip(image_spans, grids, strict=True):
        if end - start != gh * gw or start < cursor:
            raise ValueError(f"image span [{start}, {end}) does not hold a {gh}x{gw} grid")
        out[:, cursor:start] = torch.arange(position, position + start - cursor)
        position += start - cursor
        rows = torch.arange(gh).repeat_interleave(gw)  # (G,) row-major
        cols = torch.arange(gw).repeat(gh)
        out[0, start:end] = position
        out[1, start:end] = position + rows
        out[2, start:end] = position + cols
        position += max(gh, gw)
        cursor = end
    out[:, cursor:] = torch.arange(position, position + length - cursor)
    position += length - cursor
    return MropePositions(out, int(out.max()) + 1 if length else 0)
