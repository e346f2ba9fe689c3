"""Pipelined block decoding (Fast-dVLA; docs/ALGORITHMS.md §8): several blocks denoise in one
forward, each starting before its predecessor is complete.

The state is the block loop's (`AnswerState`: the cache holds everything before `base`, the
start of the first block whose K/V are not committed). An *active set* of consecutive blocks
starts with that block. Per step:

1. the first active block's first token is decided from the logits that predict it when it
   is unknown (the token shift; `resolve_first`);
2. blocks join: the block after the last active one joins when its predecessor's completion
   ratio (decided / editable positions) is at least `add_threshold` and its first token is
   known — a block's values are predicted from inside the block, starting at its first
   position, so a block whose first token is still a mask cannot start (the action
   scaffold starts every block at a structural lead; in the driving scaffold a section's
   later blocks start at a value, so they run serially);
3. one forward covers the window of all active blocks after the cache
   (`model.masks.pipeline_mask`): each block sees the cached prefix, the earlier active
   blocks (as they stand, masks included) and all of itself;
4. each incomplete block commits tokens by its status, decided before the forward:
   * *head* (every predecessor complete): section diffusion's rule, every token above
     `confidence_threshold` and at least the most confident one — so with
     `add_threshold = 1` the pipeline is serial block diffusion, token for token;
   * *fully activated* (predecessor ≥ `activate_threshold`): every token above
     `semi_confidence`, and at least ceil(remaining / `commit_divisor`) by confidence;
   * *semi-activated* (predecessor ≥ `add_threshold`): only tokens above `semi_confidence`;
5. K/V: the leading blocks that were complete before the forward saw only the cache and
   themselves with final tokens, so the K/V this forward wrote for them are exact: they are
   committed (`KVCache.commit`) and the cache moves past them. A block is therefore
   committed only once it and all its predecessors are complete, one forward after it
   completed — a forward its successors need anyway. Its rows use the attention its K/V are
   committed with (`DecodeContext.cache_attention`: bidirectional inside the block for robot
   models, token-causal for vehicle models, as section diffusion's closing forward).

The last blocks' K/V are never written: nothing after them reads them. A step's time is
split evenly over the sections of the blocks it denoised (`Plan.timings_ms`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from blockplan.engine.block_loop import AnswerState, DecodeContext, resolve_first, section_of
from blockplan.engine.device import synchronize
from blockplan.engine.picking import GreedyPicker
from blockplan.engine.strategies import commit_confident
from blockplan.model.masks import pipeline_mask

HEAD, FULL, SEMI = "head", "full", "semi"


@dataclass(frozen=True)
class PipelineOptions:
    """The thresholds of `config.PipelineConfig`, plus the head's (section diffusion's)."""

    confidence_threshold: float = 0.9
    add_threshold: float = 0.3
    activate_threshold: float = 0.7
    semi_confidence: float = 0.5
    commit_divisor: int = 3


class _Blocks:
    """Per-block progress of row 0."""

    def __init__(self, ctx: DecodeContext, state: AnswerState) -> None:
        self.blocks = ctx.scaffold.blocks
        self.state = state
        self.editable = torch.tensor(np.asarray(ctx.scaffold.is_editable))

    def unknown(self, j: int) -> int:
        b = self.blocks[j]
        return int((~self.state.is_known[0, b.start : b.end]).sum())

    def ratio(self, j: int) -> float:
        """Completion ratio: decided editable positions / editable positions."""
        b = self.blocks[j]
        num_editable = int(self.editable[b.start : b.end].sum())
        return 1.0 - self.unknown(j) / num_editable if num_editable else 1.0

    def is_complete(self, j: int) -> bool:
        return self.unknown(j) == 0

    def first_known(self, j: int) -> bool:
        return bool(self.state.is_known[0, self.blocks[j].start])


def decode_pipelined(ctx: DecodeContext, state: AnswerState, options: PipelineOptions) -> None:
    """Decode the whole answer (one row) with the pipeline of the module docstring."""
    if state.tokens.shape[0] != 1:
        raise ValueError(f"pipelined decoding runs one row, got {state.tokens.shape[0]}")
    progress = _Blocks(ctx, state)
    blocks, A = progress.blocks, len(ctx.scaffold)
    picker = GreedyPicker()
    for section in ctx.scaffold.sections:
        ctx.stats.section_ms.setdefault(section.name, 0.0)
    first, end = 0, 1  # blocks [first, end) are active; [0, first) are in the cache
    for _ in range(2 * A + len(blocks) + 1):  # each step commits a token or a block
        if first == len(blocks):
            return
        t0 = time.perf_counter()
        w = blocks[first].start
        resolve_first(ctx, state, picker)
        end = max(end, first + 1)
        while (
            end < len(blocks)
            and progress.first_known(end)
            and progress.ratio(end - 1) >= options.add_threshold
        ):
            end += 1
        riding = 0  # leading blocks complete before this forward: committed after it
        while first + riding < end and progress.is_complete(first + riding):
            riding += 1
        if first + riding == end == len(blocks):
            state.base = A  # the rest is decided; nothing reads these blocks' K/V
            return
        status = {}  # the incomplete active blocks (none when only finished blocks ride)
        for j in range(first + riding, end):
            if j == first + riding:
                status[j] = HEAD
            elif progress.ratio(j - 1) >= options.activate_threshold:
                status[j] = FULL
            else:
                status[j] = SEMI
        remaining = {j: progress.unknown(j) for j in status}
        e = blocks[end - 1].end
        spans = [(b.start - w, b.end - w) for b in blocks[first:end]]
        causal = [j < first + riding and ctx.cache_attention == "causal" for j in range(first, end)]
        mask = pipeline_mask(ctx.cache.length, spans, causal)
        positions = torch.arange(ctx.answer_start + w, ctx.answer_start + e)
        logits = ctx.model(state.tokens[:, w:e], positions=positions, mask=mask, cache=ctx.cache)
        logits = ctx.restrict(logits)  # (1, W, V): slot p is predicted at p - 1
        ctx.stats.num_forwards += 1
        ctx.stats.active_blocks.append(len(status))
        for j, kind in status.items():
            b = blocks[j]
            rows = logits[:, b.start - w : b.end - 1 - w]  # predict b.start + 1 .. b.end - 1
            if kind == HEAD:
                threshold, minimum = options.confidence_threshold, 1
            elif kind == FULL:
                threshold = options.semi_confidence
                minimum = math.ceil(remaining[j] / options.commit_divisor)
            else:
                threshold, minimum = options.semi_confidence, 0
            commit_confident(ctx, state, b.start + 1, rows, threshold, minimum)
        n = blocks[first + riding - 1].end - w if riding else 0
        ctx.cache.commit(n)
        if riding:
            state.base = w + n
            state.next_logits = logits[:, n - 1]  # predicts the next block's first position
            first += riding
        synchronize(logits.device)
        # The step's time, split evenly over the blocks it denoised (or the one it closed).
        ms = (time.perf_counter() - t0) * 1e3
        timed = [blocks[j].start for j in status] or [w]
        for start in timed:
            section = section_of(ctx.scaffold, start)
            ctx.stats.section_ms[section] += ms / len(timed)
    raise RuntimeError("pipelined decoding made no progress")  # a bug
