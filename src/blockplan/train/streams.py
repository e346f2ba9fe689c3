"""The two-stream training layout (docs/ALGORITHMS.md §1) in one sequence of length P + (1 + n)·A:

    [ prompt (P) | clean answer (A) | noisy copy 1 (A) | … | noisy copy n (A) ]

* prompt: frame-local (a frame's visual tokens see the header and their own frame; text sees
  everything before it) — the same mask the planner prefills with;
* clean stream: token-causal over the prompt and the clean answer (the AR stream, and the
  K/V that the noisy blocks read, exactly as the decoder's KV cache holds committed blocks);
* noisy copy: each block sees the prompt, the *clean* answer before the block's start, and
  its own noisy block bidirectionally — the draft forward of scaffold speculative decoding.

Every copy of answer position a sits at position P + a (RoPE), so a noisy token and its
clean twin share a position. Noisy tokens are never keys of anything but their own block.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from blockplan.model.masks import block_causal_mask
from blockplan.schema import Block


def two_stream_mask(
    prompt_mask: torch.Tensor, blocks: Sequence[Block], num_noisy: int
) -> torch.Tensor:
    """(S, S) bool, S = P + (1 + num_noisy)·A, True = may attend."""
    P = prompt_mask.shape[0]
    A = blocks[-1].end
    S = P + (1 + num_noisy) * A
    mask = torch.zeros(S, S, dtype=torch.bool, device=prompt_mask.device)
    # clean stream: the prompt's own mask, then token-causal answer over the whole prompt
    mask[: P + A, : P + A] = block_causal_mask(prompt_mask, [(a, a + 1) for a in range(A)])
    # noisy block b: bidirectional inside the block (the block-causal mask's diagonal blocks)
    within = block_causal_mask(prompt_mask[:0, :0], [(b.start, b.end) for b in blocks])  # (A, A)
    earlier = torch.zeros(A, A, dtype=torch.bool, device=prompt_mask.device)
    for b in blocks:
        earlier[b.start : b.end, : b.start] = True
    within &= ~earlier
    for c in range(num_noisy):
        rows = slice(P + (1 + c) * A, P + (2 + c) * A)
        mask[rows, :P] = True
        mask[rows, P : P + A] = earlier
        mask[rows, rows] = within
    return mask


def two_stream_positions(prompt_len: int, answer_len: int, num_noisy: int) -> torch.Tensor:
    """(S,) positions: the prompt and every answer copy at P + a."""
    answer = torch.arange(prompt_len, prompt_len + answer_len)
    return torch.cat([torch.arange(prompt_len)] + [answer] * (1 + num_noisy))
