"""`dflash`: scaffold speculative decoding whose drafts come from a DFlash drafter
(`model/drafter.py`, docs/ALGORITHMS.md §4.7) instead of a target draft forward.

The block loop, the windows, the verify forward and the acceptance rule are scaffold spec's
(`block_loop.decode_span`): structural slots stay the scaffold's, the previous plan's
answer is still each block's first proposal (`decoding.draft_from_previous`), and the
drafter fills the free slots of every other window in one forward of its own. The target
runs only the prefill, the verifies and the closes of known runs, so a window costs one
target forward; the tokens are AR greedy's whatever the drafter proposes. Where the model
folder has an answer n-gram table (`decoding.ngram_drafts`), the explanation is proposed
from it first, as in scaffold spec (no forward at all), and the drafter fills in where the
table knows no context.

What the drafter reads: the target's residual stream after the drafter's `target_layers`
at the C positions before the window. Every target forward computes them for its rows
(`Decoder.forward(hidden_layers=...)`); `FeatureStore` keeps the rows the cache committed
(the prompt's last C, then each answer position once its K/V are exact).
"""

from __future__ import annotations

import numpy as np
import torch

from blockplan.decoding.block_loop import AnswerState, DecodeContext, Propose, decode_span
from blockplan.decoding.picking import GreedyPicker
from blockplan.model.drafter import Drafter


class FeatureStore:
    """Target features (B, C + A, F) by position: index C - k is the prompt's k-th last
    position, C + p answer position p. `pending` holds the last forward's rows until the
    cache says how many of them were committed."""

    def __init__(self, drafter: Drafter, batch: int, answer_len: int) -> None:
        c = drafter.config
        self.layers = c.target_layers
        self.context = C = c.context
        head = drafter.head
        self.rows = head.new_zeros(batch, C + answer_len, c.feature_size)
        self.valid = np.zeros(C + answer_len, dtype=bool)
        self.pending: tuple[int, torch.Tensor] | None = None  # (answer start, (B, W, F))

    def put_prompt(self, features: torch.Tensor) -> None:
        """The prefill's rows (B, P, F): the last C are the first window's context."""
        k = min(self.context, features.shape[1])
        self.rows[:, self.context - k : self.context] = features[:, -k:]
        self.valid[self.context - k : self.context] = True

    def put_pending(self, start: int, features: torch.Tensor) -> None:
        self.pending = (start, features)

    def settle(self, committed: int) -> None:
        """Keep the pending rows at answer positions < `committed` (the cache's answer
        length): their K/V, so their hidden states, are exact."""
        if self.pending is None:
            return
        start, features = self.pending
        n = min(max(committed - start, 0), features.shape[1])
        if n:
            i = self.context + start
            self.rows[:, i : i + n] = features[:, :n]
            self.valid[i : i + n] = True
        self.pending = None

    def window_context(self, w: int) -> tuple[torch.Tensor, np.ndarray]:
        """The rows (B, C, F) of positions w - C .. w - 1 and which of them exist (C,)."""
        return self.rows[:, w : w + self.context], self.valid[w : w + self.context]


def dflash_proposal(drafter: Drafter) -> Propose:
    """One drafter forward over the window: the argmax over its vocabulary, within each
    slot's static allowed set, at the unknown slots; the known slots keep their tokens."""
    vocab = drafter.vocab.cpu().numpy()
    cache: dict = {}

    def propose(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
        window = state.tokens[:, w:e]  # (B, W)
        unknown = ~state.known[:, w:e]
        if not unknown.any():
            return window
        store = ctx.features
        store.settle(ctx.cache.length - ctx.prompt_len)  # answer slots in the cache
        features, exists = store.window_context(w)  # (B, C, F), (C,)
        B, W = window.shape
        device = drafter.head.device
        valid = None
        if not exists.all():
            keys = np.concatenate([exists, np.ones(W, dtype=bool)])
            valid = torch.from_numpy(keys).to(device).expand(B, -1)
        logits = drafter(
            features, window.to(device), torch.from_numpy(unknown).to(device), valid
        )  # (B, W, S)
        ctx.stats.num_draft_forwards += 1
        ctx.stats.num_spec_steps += 1
        scores = logits.float().cpu().numpy()
        if ctx.constraints is not None:
            key = id(ctx.constraints)
            if key not in cache:  # the static banned sets at the drafter's ids, once
                cache.clear()
                cache[key] = ctx.constraints.static_banned[:, vocab]  # (A, S)
            np.copyto(scores, -np.inf, where=cache[key][w:e])
        drafted = vocab[scores.argmax(axis=-1)]  # (B, W)
        return torch.from_numpy(np.where(state.known[:, w:e], state.ids[:, w:e], drafted))

    return propose


def decode_dflash(
    ctx: DecodeContext, state: AnswerState, drafter: Drafter, window: str = "adaptive"
) -> None:
    """Scaffold spec with the drafter's proposals: the previous answer's first, where
    `ctx.hint` holds one, and the answer n-gram table's in the free-text sections, where
    `ctx.ngrams` holds one. `ctx.features` must have been set before the prefill."""
    from blockplan.decoding.ngrams import ngram_proposal
    from blockplan.decoding.strategies import hinted_draft_proposal, spec_window

    draft = dflash_proposal(drafter)
    if ctx.ngrams is not None:  # the explanation from the table where it knows a context
        draft = ngram_proposal(ctx.ngrams, draft)
    propose = draft if ctx.hint is None else hinted_draft_proposal(ctx.hint, draft)
    decode_span(ctx, state, len(ctx.scaffold), spec_window(ctx, window), propose, GreedyPicker())
