"""The five decoding strategies (docs/ALGORITHMS.md §4) as small functions on one block loop.

Cached strategies differ only in where a window ends and what fills its unknown slots:

| strategy            | window                           | proposal                        |
|---------------------|----------------------------------|---------------------------------|
| `ar`                | known run up to the next unknown | none (one forward per token)    |
| `scaffold_spec`     | the scaffold block               | one bidirectional draft forward |
| `section_diffusion` | the scaffold block               | denoise to full, then commit    |

`rollouts` is `scaffold_spec`, forked N ways at the trajectory and sampled in verify.

`full_diffusion` keeps no cache: every step recomputes the prompt and the whole answer.
"""

from __future__ import annotations

import numpy as np
import torch

from blockplan.decoding.block_loop import (
    AnswerState,
    DecodeContext,
    Propose,
    WindowEnd,
    causal_close,
    decode_span,
    draft_close,
)
from blockplan.decoding.ngrams import ngram_proposal
from blockplan.decoding.picking import (
    GreedyPicker,
    Picker,
    SamplingPicker,
    inverse_cdf,
    slot_index,
)
from blockplan.model.masks import block_causal_mask
from blockplan.schema.layout import Scaffold, Section, block_end_at

ROLLOUT_SECTION = "trajectory"


def rollout_section(scaffold: Scaffold) -> Section:
    """Where rollouts fork: the trajectory, or the last section of another answer (a robot's
    action chunk)."""
    names = [s.name for s in scaffold.sections]
    return scaffold.section(ROLLOUT_SECTION if ROLLOUT_SECTION in names else names[-1])


def prefill(ctx: DecodeContext, embeds: torch.Tensor, mask: torch.Tensor) -> AnswerState:
    """Run the prompt (1, P, W) through the model into the cache; the answer starts."""
    P = embeds.shape[1]
    positions = torch.arange(P) if ctx.positions is None else ctx.positions.for_prompt()
    taps = {} if ctx.features is None else {"hidden_layers": ctx.features.layers}
    logits = ctx.model(
        inputs_embeds=embeds, positions=positions, mask=mask, cache=ctx.cache, num_logits=1, **taps
    )  # (1, 1, V)
    if ctx.features is not None:  # dflash: the prompt's last rows are the first context
        logits, hidden = logits
        ctx.features.put_prompt(hidden)
    logits = ctx.restrict(logits)
    ctx.stats.num_forwards += 1
    ctx.cache.commit(P)
    return AnswerState.start(ctx.scaffold, logits[:, -1])


# ---- where a window ends ---------------------------------------------------------------------


def token_window(state: AnswerState, w: int, stop: int) -> int:
    """AR: the known run [w, n) up to the next unknown slot n, fed in one forward."""
    unknown = np.flatnonzero(~state.known[:, w + 1 : stop].all(axis=0))
    return w + 1 + int(unknown[0]) if len(unknown) else stop


def block_window(ctx: DecodeContext) -> WindowEnd:
    """Spec and section diffusion: the rest of the scaffold block holding w."""

    def window(state: AnswerState, w: int, stop: int) -> int:
        return min(block_end_at(ctx.scaffold, w), stop)

    return window


def adaptive_window(ctx: DecodeContext, growth: float = 2.0) -> WindowEnd:
    """Scaffold spec's windows sized by the last verify (`decoding.spec_window: adaptive`).

    A block's first window is the rest of the block. When a verify is rejected after it
    decided `a` editable slots (the accepted ones and the correction; the fewest over the
    rows), the next window of that block covers at most `growth · a` editable slots: slots
    far past where the draft last went wrong are rarely accepted, and every slot of a window
    costs a draft row and a verify row. A window that is accepted whole is followed by the
    rest of the block again. Which tokens are decided does not depend on the windows."""
    editable = np.asarray(ctx.scaffold.is_editable)
    last = {"w": -1, "e": -1, "cap": None}

    def window(state: AnswerState, w: int, stop: int) -> int:
        end = min(block_end_at(ctx.scaffold, w), stop)
        if last["w"] < w < last["e"]:  # inside the last window: it was rejected at w
            decided = int(editable[last["w"] + 1 : w + 1].sum())
            last["cap"] = max(1, int(np.ceil(growth * decided)))
        elif w != last["w"]:  # a new block, or the last window was accepted whole
            last["cap"] = None
        e = end
        if last["cap"] is not None:
            unknown = np.flatnonzero(~state.known[:, w + 1 : end].all(axis=0))
            if len(unknown) > last["cap"]:
                e = w + 2 + int(unknown[last["cap"] - 1])  # through the cap-th unknown slot
        last.update(w=w, e=e)
        return e

    return window


# ---- what fills the unknown slots ----------------------------------------------------------


def no_proposal(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
    return state.tokens[:, w:e]  # (B, W)


def draft_logits(
    ctx: DecodeContext, state: AnswerState, w: int, e: int
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """One forward with window [w, e) bidirectional: the token-shifted logits (B, R, V) that
    predict its unknown slots, within each slot's static allowed set, and the window slots
    (R,) they were computed at (None: all W - 1, slot j predicting j + 1). None when the
    window holds no unknown slot."""
    unknown = ~state.known[:, w:e]  # (B, W) numpy: the bookkeeping stays off torch
    if not unknown.any():
        return None
    # Slot j predicts j + 1: the LM head runs only before unknown slots (all W-1: a slice).
    slots = np.flatnonzero(unknown[:, 1:].any(axis=0))  # (R,)
    rows = None if len(slots) == e - w - 1 else torch.from_numpy(slots)
    window = state.tokens[:, w:e]  # (B, W), mask_id at unknown slots
    if rows is None:
        logits = ctx.forward(window, w, is_draft=True)[:, :-1]  # (B, W-1, V)
    else:
        logits = ctx.forward(window, w, is_draft=True, rows=rows)  # (B, R, V)
    ctx.stats.num_spec_steps += 1
    if ctx.constraints is not None:
        if ctx.writable(logits):  # the forward's own new array: mask it in place, in numpy
            banned = ctx.constraints.static_banned[w + 1 : e]  # (W-1, V)
            banned = banned if rows is None else banned[slots]  # (R, V)
            np.copyto(logits.numpy(), -np.inf, where=banned)  # broadcast over the rows B
            return logits, rows
        allowed = ctx.constraints.static_on(logits.device)[w + 1 : e]  # (W-1, V)
        allowed = allowed if rows is None else allowed[rows.to(allowed.device)]  # (R, V)
        logits = logits.masked_fill(~allowed, float("-inf"))
    return logits, rows


def place_draft(
    state: AnswerState,
    w: int,
    e: int,
    drafted: torch.Tensor | np.ndarray,
    rows: torch.Tensor | None,
) -> torch.Tensor:
    """The window (B, W) with the drafted ids (B, R), predicted at window slots `rows`,
    written one slot later at its unknown slots."""
    window = state.ids[:, w:e]  # numpy view of the answer
    shifted = window.copy()  # (B, W)
    shifted[:, 1:][:, slice(None) if rows is None else rows.numpy()] = np.asarray(drafted)
    return torch.from_numpy(np.where(state.known[:, w:e], window, shifted))


def draft_proposal(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
    """One forward with the window bidirectional; argmax of the token-shifted logits (within
    each slot's static allowed set)."""
    drafted = draft_logits(ctx, state, w, e)
    if drafted is None:
        return state.tokens[:, w:e]
    logits, rows = drafted
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64):
        return place_draft(state, w, e, logits.numpy().argmax(axis=-1), rows)
    return place_draft(state, w, e, logits.argmax(dim=-1).cpu(), rows)  # the answer: CPU


def hinted_draft_proposal(hint: torch.Tensor, draft: Propose = draft_proposal) -> Propose:
    """Scaffold spec's draft when a guess of the whole answer is at hand (`ctx.hint`, the
    previous plan's answer: at 10 Hz most of it recurs). Each block's windows propose the
    hint's tokens at their unknown slots and skip the draft forward, until a hinted window
    is rejected at its first unknown slot; the rest of that block is drafted by `draft`.
    A wrong hint costs at most that one verify (which still decides one token); which tokens
    the answer ends with does not depend on it (greedy: AR's)."""
    hint = hint.reshape(1, -1)
    last: dict = {"w": -1, "e": -1, "unknown": None, "stale_e": -1}

    def propose(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
        window = state.tokens[:, w:e]  # (B, W)
        unknown = ~state.is_known[:, w:e]
        if not unknown.any():
            return window
        previous = last["unknown"]  # the last hinted window's unknown slots, if in this block
        same_block = previous is not None and last["e"] == e and w > last["w"]
        if same_block and not previous[:, 1 : w - last["w"]].any():
            # no hinted token was accepted before the correction at w: the hint has
            # diverged in this block
            last["stale_e"] = e
        if last["stale_e"] == e:
            last["unknown"] = None
            return draft(ctx, state, w, e)
        last.update(w=w, e=e, unknown=unknown.clone())
        return torch.where(unknown, hint[:, w:e].expand_as(window), window)

    return propose


def coupled_draft_proposal(picker: SamplingPicker) -> Propose:
    """The draft of sampled rows: each unknown slot is drafted by inverse-CDF sampling from
    the draft logits with the very uniform the verify step will use for that slot
    (`SamplingPicker.upcoming`). An argmax draft matches a sampled verify token only as
    often as the top token is drawn; a coupled one wherever the draft's and the verify's
    distributions are close. Which tokens the rows end with does not change: proposals
    only decide how many are accepted per forward."""
    if picker.temperature == 0:
        return draft_proposal

    def propose(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
        drafted = draft_logits(ctx, state, w, e)
        if drafted is None:
            return state.tokens[:, w:e]
        logits, rows = drafted
        scaled = logits.cpu().double().numpy() / picker.temperature  # (B, R, V)
        index = slot_index(None if rows is None else rows.numpy())  # window slot -> row
        unknown = (~state.is_known[:, w + 1 : e]).numpy()  # (B, W-1): slot j + 1 unknown
        ids = scaled.argmax(axis=-1)  # (B, R): rows' slots another row needs stay argmax
        for b in range(scaled.shape[0]):
            before = np.flatnonzero(unknown[b])  # window slots predicting this row's unknowns
            r = before if index is None else index[before]
            ids[b, r] = inverse_cdf(scaled[b, r], picker.upcoming(b, len(before)))
        return place_draft(state, w, e, torch.from_numpy(ids), rows)

    return propose


def denoise_proposal(threshold: float) -> Propose:
    """Repeat bidirectional forwards over the window, committing every slot whose confidence
    exceeds `threshold` (at least the most confident one per row), until none is unknown."""

    def propose(ctx: DecodeContext, state: AnswerState, w: int, e: int) -> torch.Tensor:
        while (~state.is_known[:, w:e]).any():
            logits = ctx.forward(state.tokens[:, w:e], w, is_draft=True)  # (B, W, V)
            commit_confident(ctx, state, w + 1, logits[:, :-1], threshold)
        return state.tokens[:, w:e]

    return propose


def commit_confident(
    ctx: DecodeContext,
    state: AnswerState,
    start: int,
    logits: torch.Tensor,
    threshold: float,
    minimum: int = 1,
) -> None:
    """Commit the argmax at every unknown position of [start, start + n) whose confidence
    (max probability) exceeds `threshold`, and at least the `minimum` most confident ones per
    row (the pipelined strategy's semi-activated blocks: 0).

    logits (B, n, V) predict positions start.. directly (already token-shifted). Only
    positions the constraints make eligible compete, under their allowed sets.
    """
    B, n, _ = logits.shape
    unknown = ~state.is_known[:, start : start + n]  # (B, n)
    eligible = unknown.clone()
    logits = logits.cpu().double()  # beside the answer state (CPU), in float64 like the pickers
    if ctx.constraints is not None:
        logits = logits.clone()
        for b, i in unknown.nonzero().tolist():
            p = start + i
            if not ctx.constraints.is_eligible(p, state.is_known[b].numpy()):
                eligible[b, i] = False
                continue
            allowed = torch.from_numpy(ctx.constraints.allowed(p, state.tokens[b].numpy()))
            logits[b, i] = logits[b, i].masked_fill(~allowed, float("-inf"))
    conf, best = torch.softmax(logits, dim=-1).max(dim=-1)  # (B, n)
    conf = torch.where(eligible, conf, torch.full_like(conf, -1.0))
    chosen = conf > threshold
    rows = eligible.any(dim=-1).nonzero().flatten()
    if minimum == 1:
        chosen[rows, conf[rows].argmax(dim=-1)] = True
    elif minimum > 1:
        for b in rows.tolist():
            k = min(minimum, int(eligible[b].sum()))
            chosen[b, conf[b].topk(k).indices] = True
    chosen &= eligible
    window = state.tokens[:, start : start + n]
    window.copy_(torch.where(chosen, best, window))
    state.is_known[:, start : start + n] |= chosen


# ---- the strategies --------------------------------------------------------------------------


def decode_ar(ctx: DecodeContext, state: AnswerState, picker: Picker | None = None) -> None:
    decode_span(ctx, state, len(ctx.scaffold), token_window, no_proposal, picker or GreedyPicker())


def spec_window(ctx: DecodeContext, kind: str) -> WindowEnd:
    """The window rule `decoding.spec_window` names: "adaptive" or "block"."""
    if kind == "adaptive":
        return adaptive_window(ctx)
    if kind == "block":
        return block_window(ctx)
    raise ValueError(f"spec_window={kind!r}: must be 'adaptive' or 'block'")


def decode_scaffold_spec(
    ctx: DecodeContext,
    state: AnswerState,
    picker: Picker | None = None,
    stop: int | None = None,
    window: str = "adaptive",
) -> None:
    """Draft forward + verify per window; with `ctx.hint`, hinted drafts first; with
    `ctx.ngrams`, the free-text sections drafted from the table instead of a forward."""
    stop = len(ctx.scaffold) if stop is None else stop
    draft = draft_proposal if ctx.ngrams is None else ngram_proposal(ctx.ngrams, draft_proposal)
    propose = draft if ctx.hint is None else hinted_draft_proposal(ctx.hint, draft)
    decode_span(ctx, state, stop, spec_window(ctx, window), propose, picker or GreedyPicker())


def decode_section_diffusion(ctx: DecodeContext, state: AnswerState, threshold: float) -> None:
    propose = denoise_proposal(threshold)
    close = draft_close if ctx.cache_attention == "block" else causal_close
    A = len(ctx.scaffold)
    decode_span(ctx, state, A, block_window(ctx), propose, GreedyPicker(), close)


def decode_rollouts(
    ctx: DecodeContext,
    state: AnswerState,
    picker: SamplingPicker,
    num_rollouts: int,
    trajectory: str = "scaffold_spec",
    window: str = "adaptive",
) -> None:
    """Greedy scaffold spec up to the trajectory, then fork the cache into N rows and decode
    the trajectory of all N in one batch, sampling: `trajectory` "scaffold_spec" verifies
    drafts coupled to the verify's uniforms (`coupled_draft_proposal`), "ar" decides one token
    per forward for every row (`rollouts.trajectory_decoding`; the same tokens). (The
    rollouts fork at the answer's last section: the trajectory; a robot's chunk, its only
    section.)"""
    fork_at = rollout_section(ctx.scaffold).start
    decode_scaffold_spec(ctx, state, GreedyPicker(), stop=fork_at, window=window)
    ctx.cache.fork(num_rollouts)
    state.fork(num_rollouts)
    A = len(ctx.scaffold)
    if trajectory == "ar":
        decode_span(ctx, state, A, token_window, no_proposal, picker)
    elif trajectory == "scaffold_spec":
        propose = coupled_draft_proposal(picker)
        decode_span(ctx, state, A, spec_window(ctx, window), propose, picker)
    else:
        raise ValueError(f"trajectory={trajectory!r}: must be 'scaffold_spec' or 'ar'")


def decode_full_diffusion(
    ctx: DecodeContext,
    embeds: torch.Tensor,  # (1, P, W) the prompt
    prompt_mask: torch.Tensor,  # (P, P)
    threshold: float,
    max_steps: int,
) -> AnswerState:
    """dVLM-AD style: no KV cache; each step recomputes prompt + answer with the answer fully
    bidirectional and commits every editable slot above `threshold` (at least one); the last
    allowed step commits all remaining slots."""
    scaffold = ctx.scaffold
    P, A = embeds.shape[1], len(scaffold)
    mask = block_causal_mask(prompt_mask, [(0, A)])  # (P + A, P + A)
    positions = torch.arange(P + A) if ctx.positions is None else ctx.positions.with_answer(A)
    state = AnswerState.start(scaffold, embeds.new_zeros(1, 1))
    for step in range(max_steps):
        if state.is_known.all():
            break
        answer = ctx.model.embed(state.tokens)  # (1, A, W)
        inputs = torch.cat([embeds, answer], dim=1)  # (1, P + A, W)
        logits = ctx.model(inputs_embeds=inputs, positions=positions, mask=mask, num_logits=A + 1)
        logits = ctx.restrict(logits)[:, :A]  # (1, A, V): slot a is predicted at P - 1 + a
        ctx.stats.num_forwards += 1
        commit_confident(ctx, state, 0, logits, threshold)
        if step == max_steps - 1:  # out of steps: commit the rest from these logits
            while not state.is_known.all():
                commit_confident(ctx, state, 0, logits, -1.0)
    state.base = A
    return state


# ---- the text sections before a flow trajectory head (docs/ALGORITHMS.md §7.1) -------------

FLOW_STRATEGIES = ("ar", "scaffold_spec", "section_diffusion", "rollouts")


def decode_text_sections(
    ctx: DecodeContext,
    state: AnswerState,
    strategy: str,
    threshold: float,
    window: str = "adaptive",
) -> None:
    """Decode the answer up to the trajectory with `strategy` (rollouts: greedy scaffold
    spec, the fork comes after), leaving the cache holding the prompt and the reasoning
    sections — the prefix the flow head reads."""
    stop = rollout_section(ctx.scaffold).start
    if strategy == "ar":
        decode_span(ctx, state, stop, token_window, no_proposal, GreedyPicker())
    elif strategy in ("scaffold_spec", "rollouts"):
        decode_scaffold_spec(ctx, state, GreedyPicker(), stop=stop, window=window)
    elif strategy == "section_diffusion":
        close = draft_close if ctx.cache_attention == "block" else causal_close
        propose = denoise_proposal(threshold)
        decode_span(ctx, state, stop, block_window(ctx), propose, GreedyPicker(), close)
    else:
        raise ValueError(
            f"decoding.strategy={strategy!r}: a flow trajectory head decodes its text with one "
            f"of {list(FLOW_STRATEGIES)}"
        )
