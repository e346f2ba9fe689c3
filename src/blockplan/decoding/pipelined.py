"""Pipelined block decoding (Fast-dVLA; docs/ALGORITHMS.md §8): several blocks denoise in one
forward, each starting before its predecessor is complete — as three strategy functions of
the one block loop (`block_loop.decode_span`).

The loop's window is the scaffold block at `base` (the *head*: the first block whose K/V are
not committed). The pipeline keeps an *active set*: the head and the blocks after it that
have joined. One *pipeline step* is one forward:

1. blocks join: the block after the last active one joins when its predecessor's completion
   ratio (decided / editable positions) is at least `add_threshold` and its first token is
   known — a block's values are predicted from inside the block, starting at its first
   position (the token shift), so a block whose first token is still a mask cannot start.
   The action scaffold opens every block with a structural lead; in the driving scaffold a
   section's later blocks start at a value, which only the close of the previous block
   decides (`resolve_first`), so those run serially;
2. one forward covers the window of all active blocks after the cache
   (`model.masks.pipeline_mask`): each block sees the cached prefix, the earlier active
   blocks (as they stand, masks included) and all of itself;
3. each incomplete active block commits tokens by its status, decided before the forward:
   * *head* (every predecessor complete): section diffusion's rule, every token above
     `confidence_threshold` and at least the most confident one — so with
     `add_threshold = 1` the pipeline is serial block diffusion, token for token;
   * *fully activated* (predecessor ≥ `activate_threshold`): every token above
     `semi_confidence`, and at least ceil(remaining / `commit_divisor`) by confidence;
   * *semi-activated* (predecessor ≥ `add_threshold`): only tokens above `semi_confidence`.

`propose` runs pipeline steps until the head is complete. `close` then runs one more step in
which the head's rows use the attention its K/V are committed with
(`DecodeContext.cache_attention`: bidirectional inside the block for robot models,
token-causal for vehicle models, as section diffusion's close) and the next blocks keep
denoising; the loop commits the head's K/V from it. So a block's K/V are committed only once
it and all its predecessors are complete, and the forward that writes them is one the next
blocks need anyway (section diffusion spends a forward of its own on it). When everything
from the head on is decided the close runs no forward: nothing after it reads those K/V.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from blockplan.decoding.block_loop import (
    AnswerState,
    DecodeContext,
    decode_span,
)
from blockplan.decoding.picking import GreedyPicker
from blockplan.decoding.strategies import commit_confident
from blockplan.model.masks import pipeline_mask
from blockplan.schema.layout import block_end_at

HEAD, FULL, SEMI = "head", "full", "semi"


@dataclass(frozen=True)
class PipelineOptions:
    """The thresholds of `config.PipelineConfig`, plus the head's (section diffusion's)."""

    confidence_threshold: float = 0.9
    add_threshold: float = 0.0
    activate_threshold: float = 0.0
    semi_confidence: float = 0.5
    commit_divisor: int = 3


class Pipeline:
    """The active set of one decode (one row) and the strategy functions over it."""

    def __init__(self, ctx: DecodeContext, state: AnswerState, options: PipelineOptions) -> None:
        if state.tokens.shape[0] != 1:
            raise ValueError(f"pipelined decoding runs one row, got {state.tokens.shape[0]}")
        self.ctx, self.state, self.options = ctx, state, options
        self.blocks = ctx.scaffold.blocks
        self.index = {b.start: j for j, b in enumerate(self.blocks)}
        self.editable = torch.tensor(np.asarray(ctx.scaffold.is_editable))
        self.end = 1  # active blocks: [head, end)

    # ---- block progress (row 0) ------------------------------------------------------------

    def unknown(self, j: int) -> int:
        b = self.blocks[j]
        return int((~self.state.is_known[0, b.start : b.end]).sum())

    def ratio(self, j: int) -> float:
        """Completion ratio: decided editable positions / editable positions."""
        b = self.blocks[j]
        num_editable = int(self.editable[b.start : b.end].sum())
        return 1.0 - self.unknown(j) / num_editable if num_editable else 1.0

    # ---- the block loop's functions --------------------------------------------------------

    def window_end(self, state: AnswerState, w: int, stop: int) -> int:
        return min(block_end_at(self.ctx.scaffold, w), stop)

    def propose(self, ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
        """Pipeline steps until the head [w, e) is complete."""
        while not state.is_known[:, w:e].all():
            self.step(w, closing=False)
        return state.tokens[:, w:e]

    def close(
        self, ctx: DecodeContext, state: AnswerState, ids: torch.Tensor, w: int
    ) -> torch.Tensor | None:
        """The step that writes the complete head's K/V (first among the pending slots);
        returns the head's logits, or None (no forward) when everything after is decided."""
        if state.is_known[0, w:].all():
            return None
        logits = self.step(w, closing=True)
        return logits[:, : ids.shape[1]]

    # ---- one step ----------------------------------------------------------------------------

    def step(self, w: int, closing: bool) -> torch.Tensor:
        """One forward over the active blocks from the head at w; commits tokens by status.
        Returns the window's logits (1, W, V)."""
        ctx, state, options = self.ctx, self.state, self.options
        head = self.index[w]
        self.end = max(self.end, head + 1)
        while (
            self.end < len(self.blocks)
            and bool(state.is_known[0, self.blocks[self.end].start])
            and self.ratio(self.end - 1) >= options.add_threshold
        ):
            self.end += 1
        status: dict[int, str] = {}  # the incomplete active blocks
        for j in range(head, self.end):
            if self.unknown(j) == 0:
                continue
            if all(self.unknown(i) == 0 for i in range(head, j)):
                status[j] = HEAD
            elif self.ratio(j - 1) >= options.activate_threshold:
                status[j] = FULL
            else:
                status[j] = SEMI
        remaining = {j: self.unknown(j) for j in status}
        e = self.blocks[self.end - 1].end
        spans = [(b.start - w, b.end - w) for b in self.blocks[head : self.end]]
        head_is_causal = closing and ctx.cache_attention == "causal"  # the close's K/V rows
        causal = [head_is_causal and j == head for j in range(head, self.end)]
        mask = pipeline_mask(ctx.cache.length, spans, causal)
        positions = torch.arange(ctx.answer_start + w, ctx.answer_start + e)
        logits = ctx.model(state.tokens[:, w:e], positions=positions, mask=mask, cache=ctx.cache)
        logits = ctx.restrict(logits)  # (1, W, V): slot p is predicted at p - 1
        ctx.stats.num_forwards += 1
        ctx.stats.active_blocks.append(len(status))
        for j, kind in status.items():
            b = self.blocks[j]
            rows = logits[:, b.start - w : b.end - 1 - w]  # predict b.start + 1 .. b.end - 1
            if kind == HEAD:
                threshold, minimum = options.confidence_threshold, 1
            elif kind == FULL:
                threshold = options.semi_confidence
                minimum = math.ceil(remaining[j] / options.commit_divisor)
            else:
                threshold, minimum = options.semi_confidence, 0
            commit_confident(ctx, state, b.start + 1, rows, threshold, minimum)
        return logits


def decode_pipelined(ctx: DecodeContext, state: AnswerState, options: PipelineOptions) -> None:
    """Decode the whole answer (one row) with the pipeline of the module docstring."""
    pipeline = Pipeline(ctx, state, options)
    for section in ctx.scaffold.sections:  # a section decided entirely as a follower: 0 ms
        ctx.stats.section_ms.setdefault(section.name, 0.0)
    decode_span(
        ctx,
        state,
        len(ctx.scaffold),
        pipeline.window_end,
        pipeline.propose,
        GreedyPicker(),
        pipeline.close,
    )
