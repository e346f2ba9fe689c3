"""Attention-mask builders. Every mask is bool, True = the query may attend to the key.

Shapes: (S, L) with S query tokens and L key slots. With a KV cache the keys are the `past`
committed slots followed by the S new tokens, so L = past + S.

* causal:        token i sees every earlier slot and itself (AR, verify, KV writes).
* draft:         the window sees the whole cached prefix and all of itself (bidirectional
                 inside the window) — the draft and denoising forwards.
* block-causal:  the answer is cut into blocks; inside a block attention is bidirectional,
                 across blocks causal, so a finished block's K/V never change
                 (docs/ALGORITHMS.md §1).
* pipeline:      a window of consecutive answer blocks after the cache: each block sees the
                 cached prefix, the earlier blocks of the window and all of itself (the
                 pipelined decoding of docs/ALGORITHMS.md §8); a block marked token-causal
                 sees the window only up to each of its tokens.
* frame-local:   in the prompt, a camera frame's visual tokens see the prompt header and
                 their own frame only; text tokens see everything before them
                 (docs/ALGORITHMS.md §6).
                 With `attend_header=False` (model setting `visual_attention="frame_only"`)
                 they see their own frame only: the exactly streamable layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from blockplan.schema.layout import PromptLayout


def causal_mask(
    num_new: int, num_past: int = 0, device: torch.device | None = None
) -> torch.Tensor:
    """(S, past + S): new token i sees slots [0, past + i]."""
    rows = torch.arange(num_new, device=device)[:, None] + num_past
    cols = torch.arange(num_past + num_new, device=device)[None, :]
    return cols <= rows


def draft_mask(num_new: int, num_past: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """(W, past + W): the whole cached prefix plus the whole window, bidirectional."""
    return torch.ones(num_new, num_past + num_new, dtype=torch.bool, device=device)


def window_mask(num_new: int, num_past: int, bidirectional: bool) -> torch.Tensor:
    """`draft_mask` or `causal_mask` (CPU), built in numpy: the engine makes one per
    forward, and a few numpy calls cost a fraction of the torch ones."""
    if bidirectional:
        return torch.ones(num_new, num_past + num_new, dtype=torch.bool)
    cols = np.arange(num_past + num_new)
    return torch.from_numpy(cols[None, :] <= (np.arange(num_new)[:, None] + num_past))


def frame_local_mask(
    layout: PromptLayout, device: torch.device | None = None, attend_header: bool = True
) -> torch.Tensor:
    """(P, P) prompt mask: causal, except that the visual tokens of each frame see only the
    header [0, header_end) (unless `attend_header` is False) and their own frame
    (bidirectionally).

    Text tokens after the images see everything before them. With this mask a frame's
    hidden states do not depend on the other frames, so its cached K/V can be reused when the
    window slides. (Its attention to the header still depends on the frame's distance to the
    header under RoPE, so a frame that moves to a new slot is exact only if the model is
    trained with the header distance it will be streamed at; without the header the frame's
    hidden states depend on within-frame distances only and moving it is exact.)
    """
    mask = causal_mask(len(layout), 0, device)
    for span in layout.image_spans:
        rows = slice(span.start, span.end)
        mask[rows, :] = False
        if attend_header:
            mask[rows, : layout.header_end] = True
        mask[rows, span.start : span.end] = True
    return mask


def prompt_mask(
    layout: PromptLayout, visual_attention: str, device: torch.device | None = None
) -> torch.Tensor:
    """(P, P) prompt mask for a model's `visual_attention` ("frame_and_header",
    "frame_only", or "causal": plain causal attention over the whole prompt, as Qwen2.5-VL)."""
    if visual_attention == "causal":
        return causal_mask(len(layout), 0, device)
    if visual_attention not in ("frame_and_header", "frame_only"):
        raise ValueError(f"visual_attention={visual_attention!r}: unknown")
    return frame_local_mask(layout, device, attend_header=visual_attention == "frame_and_header")


def block_causal_mask(prefix_mask: torch.Tensor, blocks: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(P + A, P + A) mask of a prompt (its own (P, P) mask) followed by an answer cut into
    blocks [start, end) relative to the answer start, covering [0, A) in order.

    Answer tokens see the whole prompt, every earlier block and all of their own block.
    One block spanning the answer gives the full-sequence diffusion mask.
    """
    P = prefix_mask.shape[0]
    A = blocks[-1][1] if blocks else 0
    mask = torch.zeros(P + A, P + A, dtype=torch.bool, device=prefix_mask.device)
    mask[:P, :P] = prefix_mask
    mask[P:, :P] = True
    expected = 0
    for start, end in blocks:
        if start != expected or end <= start:
            raise ValueError(f"block_causal_mask: blocks must tile the answer, got {(start, end)}")
        mask[P + start : P + end, P : P + end] = True
        expected = end
    return mask


def pipeline_mask(
    num_past: int,
    spans: Sequence[tuple[int, int]],
    token_causal: Sequence[bool],
    device: torch.device | None = None,
) -> torch.Tensor:
    """(W, past + W) mask of a window cut into blocks `spans` [start, end) relative to the
    window start, tiling [0, W) in order. The rows of block j see the whole cached prefix,
    every earlier block of the window and all of block j; where `token_causal[j]`, they see
    the window only up to themselves instead (causal_mask's rows). One block, not
    token-causal, is `draft_mask`; one token-causal block is `causal_mask`."""
    W = spans[-1][1] if spans else 0
    mask = torch.zeros(W, num_past + W, dtype=torch.bool, device=device)
    mask[:, :num_past] = True
    expected = 0
    for (start, end), is_causal in zip(spans, token_causal, strict=True):
        if start != expected or end <= start:
            raise ValueError(f"pipeline_mask: blocks must tile the window, got {(start, end)}")
        if is_causal:
            rows = torch.arange(start, end, device=device)[:, None]
            cols = torch.arange(W, device=device)[None, :]
            mask[start:end, num_past:] = cols <= rows
        else:
            mask[start:end, num_past : num_past + end] = True
        expected = end
    return mask
