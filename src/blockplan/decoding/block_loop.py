"""The one block loop every cached decoding strategy runs.

The answer is decoded left to right in *windows* [w, e) of answer positions. The KV cache
holds the prompt and answer positions [0, w) for every row; the token at w is known (it is
structural, or it was chosen from the logits that predict it — the token shift of
docs/ALGORITHMS.md §1: position i is predicted by the hidden state at i - 1). Per window:

1. `propose` fills the editable unknown slots of (w, e): nothing (AR), one bidirectional
   draft forward (scaffold spec), or confidence-threshold denoising (section diffusion).
2. one causal *verify* forward over the window writes its K/V and gives, at every slot j,
   the AR prediction for j + 1.
3. acceptance, per row, left to right over the unknown slots: the picker decides the token
   from the AR logits; if it equals the proposal keep going, otherwise keep the picked token
   (the correction) and stop. The K/V of every slot before the first correction are exact,
   so the cache commits them (the minimum over rows); the rest is overwritten by the next
   window, which starts at the correction. A fully accepted window also yields the bonus
   prediction for position e.

Structural slots are never generated: they are known from the start and accepted for free.
With a greedy picker this is token-for-token AR greedy whatever the proposals are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from blockplan.decoding.constraints import AnswerConstraints
from blockplan.decoding.device import synchronize
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.ngrams import AnswerNgrams
from blockplan.decoding.picking import Picker
from blockplan.model.config import DecoderConfig
from blockplan.model.masks import window_mask
from blockplan.model.positions import PromptPositions
from blockplan.schema.layout import Scaffold, section_of


class TokenModel(Protocol):
    """What the engine calls: the decoder's pure forward (a backend may wrap it)."""

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,  # (B, S)
        *,
        inputs_embeds: torch.Tensor | None = None,  # (B, S, W)
        positions: torch.Tensor | None = None,  # (S,) or (B, S)
        mask: torch.Tensor | None = None,  # (S, L) bool
        cache: KVCache | None = None,
        num_logits: int | None = None,
        logit_rows: torch.Tensor | None = None,  # (R,) ascending: only these rows' logits
    ) -> torch.Tensor: ...

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor: ...

    @property
    def decoder_config(self) -> DecoderConfig: ...


@dataclass
class DecodeStats:
    num_forwards: int = 0
    num_spec_steps: int = 0  # draft + verify pairs
    num_draft_forwards: int = 0  # forwards of a separate drafter (dflash), not the target's
    section_ms: dict[str, float] = field(default_factory=dict)
    active_blocks: list[int] = field(default_factory=list)  # pipelined: blocks per forward


@dataclass
class AnswerState:
    """The answer being decoded.

    tokens (B, A): known ids, `mask_id` at unknown slots. is_known (B, A). The cache holds
    answer positions [0, base) of every row; next_logits (B, V) predict position `base`.
    Both live on the CPU; `ids` and `known` are numpy views of the same memory, for the
    per-slot bookkeeping (a numpy element access costs a fraction of a torch one).
    """

    tokens: torch.Tensor
    is_known: torch.Tensor
    base: int
    next_logits: torch.Tensor

    def __post_init__(self) -> None:
        self.ids: np.ndarray = self.tokens.numpy()
        self.known: np.ndarray = self.is_known.numpy()

    @classmethod
    def start(cls, scaffold: Scaffold, next_logits: torch.Tensor) -> AnswerState:
        tokens = torch.tensor(np.asarray(scaffold.token_ids), dtype=torch.long)[None]  # (1, A)
        is_known = torch.tensor(~np.asarray(scaffold.is_editable))[None]  # (1, A)
        return cls(tokens, is_known, 0, next_logits)

    def fork(self, n: int) -> None:
        """Repeat row 0 into n rows (the cache is forked alongside)."""
        self.tokens = self.tokens[:1].repeat(n, 1)
        self.is_known = self.is_known[:1].repeat(n, 1)
        self.next_logits = self.next_logits[:1].repeat(n, 1)
        self.ids, self.known = self.tokens.numpy(), self.is_known.numpy()


@dataclass
class DecodeContext:
    """One decode: the model, its cache, the scaffold and the prompt length."""

    model: TokenModel
    cache: KVCache
    scaffold: Scaffold
    prompt_len: int
    banned_ids: tuple[int, ...] = ()  # never a valid answer token (e.g. the mask token)
    constraints: AnswerConstraints | None = None
    stats: DecodeStats = field(default_factory=DecodeStats)
    positions: PromptPositions | None = None  # None: prompt 0..P-1, answer from P
    # How a finished block's K/V are computed when they are committed by a diffusion
    # strategy: "causal" (token-causal, the vehicle models' AR stream) or "block"
    # (bidirectional inside the block, the robot models' diffusion forcing).
    cache_attention: str = "causal"
    # (A,) a guess of the answer (the previous plan's), proposed before any draft forward by
    # scaffold spec (`strategies.hinted_draft_proposal`); None: model drafts only.
    hint: torch.Tensor | None = None
    # the answer n-gram table (`decoding.ngrams`): scaffold spec proposes the free-text sections
    # from it without a draft forward; None: model drafts only.
    ngrams: AnswerNgrams | None = None
    # dflash (`decoding.dflash.FeatureStore`): every target forward also returns the hidden
    # states of the drafter's target layers, kept once the cache commits them; None: off.
    features: object | None = None
    _banned: dict = field(default_factory=dict, repr=False)  # banned ids as a tensor per device

    @property
    def answer_start(self) -> int:
        """The rotary position of answer slot 0."""
        return self.prompt_len if self.positions is None else self.positions.answer_start

    def allowed(self, position: int, row_tokens: np.ndarray | torch.Tensor) -> np.ndarray | None:
        """(V,) bool tokens allowed at `position` given the row's answer (A,), or None."""
        if self.constraints is None:
            return None
        if isinstance(row_tokens, torch.Tensor):
            row_tokens = row_tokens.numpy()
        return self.constraints.allowed(position, row_tokens)

    def allowed_is_static(self, position: int) -> bool:
        """Whether every row's allowed set at `position` is the same (no constraints, or a
        slot without a grammar: its static set)."""
        return self.constraints is None or position not in self.constraints.grammar_at

    def writable(self, logits: torch.Tensor) -> bool:
        """Whether the forward's logits may be edited in place through numpy: the model
        hands out a new CPU array per call (`fresh_logits`, the ONNX Runtime step) in a
        dtype numpy holds (not bfloat16 / float16)."""
        return (
            getattr(self.model, "fresh_logits", False)
            and logits.device.type == "cpu"
            and logits.dtype in (torch.float32, torch.float64)
        )

    def restrict(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits (..., V) with the banned ids at -inf: in place where `writable`, else a
        copy."""
        if self.banned_ids and self.writable(logits):
            host = logits.numpy()
            for token in self.banned_ids:  # a few ids: a basic-index write each
                host[..., token] = -np.inf
            return logits
        if self.banned_ids:
            banned = self._banned.get(logits.device)
            if banned is None:
                banned = self._banned[logits.device] = torch.tensor(
                    self.banned_ids, device=logits.device
                )
            logits = logits.index_fill(-1, banned, float("-inf"))  # a copy, not in place
        return logits

    def forward(
        self,
        ids: torch.Tensor,
        start: int,
        is_draft: bool,
        num_logits: int | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, W', V) of the last W' = num_logits (default all W) slots of answer
        window [start, start + W) of ids (B, W), or of its slots `rows` (R,) ascending."""
        W = ids.shape[1]
        first = self.answer_start + start
        positions = torch.from_numpy(np.arange(first, first + W))  # (cheaper than torch's)
        mask = window_mask(W, self.cache.length, is_draft)
        self.stats.num_forwards += 1
        only = {} if rows is None else {"logit_rows": rows}
        if self.features is not None:  # dflash: the drafter's context rows come along
            self.features.settle(self.cache.length - self.prompt_len)  # slots, not positions
            only["hidden_layers"] = self.features.layers
        logits = self.model(
            ids, positions=positions, mask=mask, cache=self.cache, num_logits=num_logits, **only
        )
        if self.features is not None:
            logits, hidden = logits
            self.features.put_pending(start, hidden)
        return self.restrict(logits)


# propose(ctx, state, w, e) -> (B, W) ids to verify; unknown slots hold proposals.
Propose = Callable[[DecodeContext, AnswerState, int, int], torch.Tensor]
# window_end(state, w, stop) -> e
WindowEnd = Callable[[AnswerState, int, int], int]
# close(ctx, state, ids, w) -> logits (B, W', V) of the last W' slots of the known window ids
# (B, W) at w, after a forward that wrote the window's K/V first among its pending slots;
# or None when no later position reads them (the window is not committed).
Close = Callable[[DecodeContext, AnswerState, torch.Tensor, int], "torch.Tensor | None"]


def causal_close(ctx: DecodeContext, state: AnswerState, ids: torch.Tensor, w: int) -> torch.Tensor:
    """A known window's K/V by a causal forward (the AR stream); only the last logit."""
    return ctx.forward(ids, w, is_draft=False, num_logits=1)  # (B, 1, V)


def draft_close(ctx: DecodeContext, state: AnswerState, ids: torch.Tensor, w: int) -> torch.Tensor:
    """A known window's K/V by a bidirectional forward (block-attention models)."""
    return ctx.forward(ids, w, is_draft=True, num_logits=1)  # (B, 1, V)


def resolve_first(ctx: DecodeContext, state: AnswerState, picker: Picker) -> None:
    """Decide the token at `base` where it is unknown, from the logits that predict it."""
    w = state.base
    column = state.known[:, w]
    if column.all():
        return
    picker.prepare(state.next_logits[:, None])  # (B, 1, V)
    rows = np.flatnonzero(~column).tolist()
    if len(rows) > 1 and ctx.allowed_is_static(w):  # one allowed set: the rows in one pass
        state.ids[rows, w] = picker.choose_rows(rows, 0, ctx.allowed(w, state.ids[rows[0]]))
    else:
        for b in rows:
            state.ids[b, w] = picker.choose(b, 0, ctx.allowed(w, state.ids[b]))
    state.known[rows, w] = True


def verify_slots(state: AnswerState, w: int, e: int) -> np.ndarray:
    """(R,) ascending: the window slots of [w, e) whose verify logits `accept` may read,
    the slot before each unknown one and the last (the bonus). The LM head runs on these."""
    before_unknown = ~state.known[:, w + 1 : e].all(axis=0)  # (W-1,): j+1 unknown
    return np.append(np.flatnonzero(before_unknown), e - w - 1)


def accept(
    ctx: DecodeContext,
    state: AnswerState,
    proposal: torch.Tensor,
    logits: torch.Tensor,
    picker: Picker,
    slots: np.ndarray | None = None,
) -> int:
    """Apply the acceptance rule to window [base, base + W); return how many slots commit.
    logits (B, W, V), or (B, R, V) at window `slots` (R,) (`verify_slots`)."""
    w = state.base
    B, W = proposal.shape
    picker.prepare(logits, slots)
    unknown = ~state.known[:, w : w + W]  # (B, W)
    proposed = proposal.numpy()
    num_exact = W
    for b in range(B):
        for i in np.flatnonzero(unknown[b, 1:]).tolist():
            i += 1
            allowed = ctx.allowed(w + i, state.ids[b])
            token = picker.choose(b, i - 1, allowed)  # slot w+i is predicted at slot w+i-1
            state.ids[b, w + i] = token
            state.known[b, w + i] = True
            # Accept while AR agrees with the proposal; the first disagreement keeps AR's
            # token (the correction) and ends the row: slots after it were computed from a
            # wrong token. If all agree, the last logit is the bonus for position w + W.
            if token != proposed[b, i]:
                num_exact = min(num_exact, i)  # K/V from slot i on used the wrong token
                break
    return num_exact


def decode_span(
    ctx: DecodeContext,
    state: AnswerState,
    stop: int,
    window_end: WindowEnd,
    propose: Propose,
    picker: Picker,
    close: Close | None = None,
) -> None:
    """Decode answer positions [state.base, stop) with the strategy's functions.

    `close` writes the K/V of a window the proposal filled completely (default
    `causal_close`; section diffusion on a block-attention model: `draft_close`; the
    pipelined strategy also denoises the next blocks in that forward)."""
    close = close or causal_close
    A = len(ctx.scaffold)
    while state.base < stop:
        t0 = time.perf_counter()
        w = state.base
        resolve_first(ctx, state, picker)
        e = window_end(state, w, stop)
        if e == A and state.known[:, w:e].all():
            state.base = e  # the answer's tail is structural: its K/V are never needed
        else:
            proposal = propose(ctx, state, w, e)  # (B, W)
            if state.known[:, w + 1 : e].all():
                # Nothing to verify (a known run): the close writes its K/V.
                logits = close(ctx, state, proposal, w)  # (B, W', V): the last rows of [w, e)
                n = e - w
                last = None if logits is None else n - 1 - (e - w - logits.shape[1])
            else:
                slots = verify_slots(state, w, e)  # (R,); all W: the plain forward
                slots = None if len(slots) == e - w else slots
                rows = None if slots is None else torch.from_numpy(slots)
                logits = ctx.forward(proposal, w, is_draft=False, rows=rows)  # (B, R, V)
                n = accept(ctx, state, proposal, logits, picker, slots)
                # slot n - 1 (the correction's predictor, or the bonus) is always computed
                last = n - 1 if slots is None else int(np.searchsorted(slots, n - 1))
            if logits is None:  # the close found that nothing after the window reads it
                state.base = e
            else:
                ctx.cache.commit(n)
                state.base = w + n
                state.next_logits = logits[:, last]
        synchronize(state.next_logits.device)  # a GPU's queued kernels belong to this window
        section = section_of(ctx.scaffold, w)
        ms = (time.perf_counter() - t0) * 1e3
        ctx.stats.section_ms[section] = ctx.stats.section_ms.get(section, 0.0) + ms
