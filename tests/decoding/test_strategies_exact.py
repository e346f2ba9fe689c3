"""Exactness: scaffold_spec ≡ ar token for token; ar ≡ naive greedy recompute; rollouts ≡ N
independent sampled decodes with the same streams. Float64 so argmax ties cannot flip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.decoding.block_loop import DecodeContext
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.picking import SamplingPicker, rollout_streams
from blockplan.decoding.strategies import (
    decode_ar,
    decode_rollouts,
    decode_scaffold_spec,
    decode_section_diffusion,
    prefill,
)
from blockplan.model.masks import causal_mask

PROMPT_LEN = 9


def _run(model, scaffold, strategy, seed, max_batch=1, **kw):
    ids = torch.randint(
        3, model.config.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(seed)
    )
    cache = KVCache.for_model(model.config, PROMPT_LEN + len(scaffold), max_batch, torch.float64)
    ctx = DecodeContext(model, cache, scaffold, PROMPT_LEN, banned_ids=(scaffold.mask_id,))
    with torch.no_grad():
        state = prefill(ctx, model.embed(ids), causal_mask(PROMPT_LEN))
        strategy(ctx, state, **kw)
    return state, ctx.stats, ids


@pytest.mark.parametrize("window", ["adaptive", "block"])
@pytest.mark.parametrize("block_size", [1, 4, 7, 32])
def test_scaffold_spec_equals_ar(decoder_factory, scaffold_factory, block_size, window):
    num_steps = 0
    num_editable = 0
    for seed in range(6):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, block_size)
        ar, ar_stats, _ = _run(model, scaffold, decode_ar, seed)
        spec, spec_stats, _ = _run(model, scaffold, decode_scaffold_spec, seed, window=window)
        assert ar.is_known.all() and spec.is_known.all()
        assert torch.equal(ar.tokens, spec.tokens), f"seed {seed}"
        structural = ~torch.as_tensor(scaffold.is_editable)
        assert torch.equal(
            ar.tokens[0, structural], torch.as_tensor(scaffold.token_ids)[structural]
        )
        num_steps += spec_stats.num_spec_steps
        num_editable += int(scaffold.is_editable.sum())
        assert ar_stats.num_forwards <= int(scaffold.is_editable.sum()) + 1
    assert num_steps > 0
    if block_size > 1:  # drafts are sometimes accepted: fewer steps than editable tokens
        assert num_steps < num_editable


def test_ar_equals_naive_greedy_recompute(decoder_factory, scaffold_factory):
    for seed in range(3):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, 4)
        ar, _, prompt = _run(model, scaffold, decode_ar, seed)
        answer = torch.as_tensor(scaffold.token_ids).clone()
        with torch.no_grad():
            for a in np.flatnonzero(scaffold.is_editable):
                seq = torch.cat([prompt[0], answer[:a]])[None]
                logits = model(seq)[0, -1]
                logits[scaffold.mask_id] = float("-inf")
                answer[a] = logits.argmax()
        assert torch.equal(ar.tokens[0], answer)


def test_section_diffusion_fills_every_slot(decoder_factory, scaffold_factory):
    model = decoder_factory(0)
    scaffold = scaffold_factory(0, 5)
    state, stats, _ = _run(model, scaffold, decode_section_diffusion, 0, threshold=0.9)
    assert state.is_known.all()
    assert not (state.tokens == scaffold.mask_id).any()
    assert stats.num_forwards >= len(scaffold.blocks)


@pytest.mark.parametrize("trajectory", ["scaffold_spec", "ar"])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
def test_rollouts_equal_independent_decodes(
    decoder_factory, scaffold_factory, temperature, trajectory
):
    """Whichever way the forked rows decode the trajectory (`rollouts.trajectory_decoding`)."""
    n = 3
    for seed in range(2):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, 6)
        picker = SamplingPicker(temperature, rollout_streams(seed, n))
        forked, stats, _ = _run(
            model,
            scaffold,
            decode_rollouts,
            seed,
            max_batch=n,
            picker=picker,
            num_rollouts=n,
            trajectory=trajectory,
        )
        assert forked.tokens.shape == (n, len(scaffold))
        fork_at = scaffold.section("trajectory").start
        for i, stream in enumerate(rollout_streams(seed, n)):
            # reference: plain AR from scratch, greedy before the trajectory, then sampled
            # with rollout i's stream
            one = SamplingPicker(temperature, [stream])
            ref, _, _ = _run(model, scaffold, _ar_greedy_then_sampled(fork_at), seed, picker=one)
            assert torch.equal(forked.tokens[i], ref.tokens[0]), f"seed {seed} rollout {i}"
        if temperature > 0:
            assert len({tuple(r) for r in forked.tokens[:, fork_at:].tolist()}) > 1


def test_token_by_token_rollouts_take_one_forward_per_editable_slot(
    decoder_factory, scaffold_factory
):
    """`trajectory="ar"`: after the fork every forward decides one editable slot of all N
    rows (the structural runs ride along), so the trajectory costs its editable count."""
    n = 4
    model = decoder_factory(1)
    scaffold = scaffold_factory(1, 6)
    trajectory = scaffold.section("trajectory")
    _, greedy, _ = _run(model, scaffold, decode_scaffold_spec, 1, stop=trajectory.start)
    editable = int(scaffold.is_editable[trajectory.start : trajectory.end].sum())
    tokens = {}
    for kind in ("scaffold_spec", "ar"):
        picker = SamplingPicker(0.7, rollout_streams(1, n))
        state, stats, _ = _run(
            model, scaffold, decode_rollouts, 1, n, picker=picker, num_rollouts=n, trajectory=kind
        )
        tokens[kind] = state.tokens
        if kind == "ar":  # the greedy prefix's forwards, then one per editable slot at most
            assert stats.num_forwards - greedy.num_forwards <= editable + 1
    assert torch.equal(tokens["ar"], tokens["scaffold_spec"])


def test_adaptive_windows_cover_at_most_twice_what_the_last_verify_decided(
    decoder_factory, scaffold_factory
):
    """`spec_window="adaptive"`: a block's first window is the rest of the block; after a
    rejection that decided `a` editable slots, the next window of that block holds at most
    2a unknown slots; and it decides the tokens the whole-block windows decide."""
    from blockplan.decoding import strategies

    calls = []
    adaptive = strategies.adaptive_window

    def recording(ctx, growth=2.0):
        window = adaptive(ctx, growth)

        def wrapped(state, w, stop):
            e = window(state, w, stop)
            unknown = int((~state.known[:, w + 1 : e].all(axis=0)).sum())
            calls.append((w, e, unknown, min(strategies.block_end_at(ctx.scaffold, w), stop)))
            return e

        return wrapped

    checked = capped = 0
    for seed in range(4):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, 32)
        editable = np.asarray(scaffold.is_editable)
        calls.clear()
        strategies.adaptive_window = recording
        try:
            got, _, _ = _run(model, scaffold, decode_scaffold_spec, seed, window="adaptive")
        finally:
            strategies.adaptive_window = adaptive
        want, _, _ = _run(model, scaffold, decode_scaffold_spec, seed, window="block")
        assert torch.equal(got.tokens, want.tokens)
        for (w0, e0, _, end0), (w1, e1, unknown1, end1) in zip(calls[:-1], calls[1:], strict=True):
            if end0 == end1 and w0 < w1 < e0:  # the same block, the last window rejected
                decided = int(editable[w0 + 1 : w1 + 1].sum())
                assert unknown1 <= 2 * decided
                checked += 1
                capped += e1 < end1
            elif end0 != end1 or w1 >= e0:  # a new block, or accepted whole: the whole rest
                assert e1 == end1
    assert checked > 0 and capped > 0  # the rule was exercised and did cut windows


def _ar_greedy_then_sampled(fork_at):
    from blockplan.decoding.block_loop import decode_span
    from blockplan.decoding.picking import GreedyPicker
    from blockplan.decoding.strategies import no_proposal, token_window

    def strategy(ctx, state, picker):
        decode_span(ctx, state, fork_at, token_window, no_proposal, GreedyPicker())
        decode_span(ctx, state, len(ctx.scaffold), token_window, no_proposal, picker)

    return strategy


@pytest.mark.parametrize("block_size", [3, 8])
def test_perfect_drafts_take_two_forwards_per_block(decoder_factory, scaffold_factory, block_size):
    """A model whose logits never depend on the context (final norm zeroed: every logit 0,
    argmax = lowest allowed id) drafts exactly what AR picks: spec then runs one draft and
    one verify per block, and its bonus token opens the next block."""
    model = decoder_factory(0)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    scaffold = scaffold_factory(1, block_size)
    ar, ar_stats, _ = _run(model, scaffold, decode_ar, 0)
    spec, spec_stats, _ = _run(model, scaffold, decode_scaffold_spec, 0)
    assert torch.equal(ar.tokens, spec.tokens)
    blocks_with_drafts = spec_stats.num_spec_steps
    assert blocks_with_drafts <= len(scaffold.blocks)
    assert spec_stats.num_forwards <= 1 + 2 * len(scaffold.blocks)
    assert spec_stats.num_forwards < ar_stats.num_forwards


def test_reading_uniforms_ahead_changes_no_draw():
    """`upcoming` peeks at the stream: the choices are those of a picker that never peeks."""
    logits = torch.randn(2, 6, 11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    peeking = SamplingPicker(0.8, rollout_streams(5, 2))
    plain = SamplingPicker(0.8, rollout_streams(5, 2))
    peeking.prepare(logits)
    plain.prepare(logits)
    for i in range(6):
        for b in range(2):
            ahead = peeking.upcoming(b, 3 - i % 3)
            assert peeking.upcoming(b, len(ahead)).tolist() == ahead.tolist()
            assert peeking.choose(b, i) == plain.choose(b, i)


def _sampled_spec_with_argmax_drafts(ctx, state, picker, num_rollouts):
    """decode_rollouts with the plain argmax draft after the fork (the old rollouts draft)."""
    from blockplan.decoding.block_loop import decode_span
    from blockplan.decoding.picking import GreedyPicker
    from blockplan.decoding.strategies import block_window, draft_proposal, rollout_section

    fork_at = rollout_section(ctx.scaffold).start
    decode_scaffold_spec(ctx, state, GreedyPicker(), stop=fork_at)
    ctx.cache.fork(num_rollouts)
    state.fork(num_rollouts)
    decode_span(ctx, state, len(ctx.scaffold), block_window(ctx), draft_proposal, picker)


def test_coupled_drafts_are_accepted_where_draft_and_verify_agree(
    decoder_factory, scaffold_factory
):
    """Final norm zeroed: the draft's and the verify's distributions are the same uniform
    one. A draft sampled with the verify's own uniforms is then always accepted (two
    forwards per block, as greedy spec with perfect drafts); an argmax draft is rejected
    at most sampled slots. The rows' tokens are the same either way."""
    n = 3
    model = decoder_factory(0)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    scaffold = scaffold_factory(1, 8)

    def rollouts(strategy):
        picker = SamplingPicker(1.0, rollout_streams(3, n))
        return _run(model, scaffold, strategy, 0, max_batch=n, picker=picker, num_rollouts=n)

    coupled, coupled_stats, _ = rollouts(decode_rollouts)
    argmax, argmax_stats, _ = rollouts(_sampled_spec_with_argmax_drafts)
    assert torch.equal(coupled.tokens, argmax.tokens)
    fork_at = scaffold.section("trajectory").start
    assert len({tuple(r) for r in coupled.tokens[:, fork_at:].tolist()}) > 1
    # one more window where the fork splits a block
    assert coupled_stats.num_forwards <= 1 + 2 * (len(scaffold.blocks) + 1)
    assert coupled_stats.num_forwards < argmax_stats.num_forwards


def _hinted(hint):
    def strategy(ctx, state):
        ctx.hint = None if hint is None else torch.as_tensor(hint)
        decode_scaffold_spec(ctx, state)

    return strategy


@pytest.mark.parametrize("block_size", [4, 32])
def test_hinted_spec_equals_ar_whatever_the_hint(decoder_factory, scaffold_factory, block_size):
    """The previous plan's answer as the first draft: the tokens stay AR's for a perfect, a
    partly right, a foreign and a garbage hint. A perfect hint needs no draft forward (one
    verify per block); a wrong one costs at most one verify per block more than none."""
    for seed in range(4):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, block_size)
        ar, _, _ = _run(model, scaffold, decode_ar, seed)
        _, plain_stats, _ = _run(model, scaffold, _hinted(None), seed)
        answer = ar.tokens[0].numpy()
        editable = np.flatnonzero(scaffold.is_editable)
        rng = np.random.default_rng(seed)
        partly = answer.copy()
        partly[editable[len(editable) // 2 :]] = rng.integers(3, model.config.vocab_size, 1)
        garbage = answer.copy()
        garbage[editable] = rng.integers(3, model.config.vocab_size, len(editable))
        foreign = _run(decoder_factory(seed + 10), scaffold, decode_ar, seed)[0].tokens[0]
        for name, hint in [
            ("perfect", answer),
            ("partly", partly),
            ("garbage", garbage),
            ("foreign", foreign),
        ]:
            spec, stats, _ = _run(model, scaffold, _hinted(hint), seed)
            assert torch.equal(spec.tokens, ar.tokens), f"seed {seed} {name} hint"
            assert stats.num_forwards <= plain_stats.num_forwards + len(scaffold.blocks), name
            if name == "perfect":
                assert stats.num_spec_steps == 0
                assert stats.num_forwards <= 1 + len(scaffold.blocks)


def test_a_hint_that_does_not_fit_the_scaffold_is_not_used(scaffold_factory):
    from blockplan.decoding.decode import usable_hint

    scaffold = scaffold_factory(0, 4)
    ids = np.asarray(scaffold.token_ids).copy()
    editable = np.flatnonzero(scaffold.is_editable)
    ids[editable] = 5
    assert torch.equal(usable_hint(ids, scaffold, 64), torch.as_tensor(ids))
    assert usable_hint(None, scaffold, 64) is None
    assert usable_hint(ids[:-1], scaffold, 64) is None  # another layout
    moved = ids.copy()
    moved[np.flatnonzero(~np.asarray(scaffold.is_editable))[0]] += 1
    assert usable_hint(moved, scaffold, 64) is None  # structural tokens differ
    big = ids.copy()
    big[editable[0]] = 64
    assert usable_hint(big, scaffold, 64) is None  # outside the vocabulary


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_choosing_rows_in_one_pass_draws_what_one_by_one_draws(temperature):
    """`choose_rows` (the forked rows at one slot, one allowed set) = `choose` per row: the
    same tokens and the same uniforms consumed from each row's stream."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 50, generator=gen)  # (B, R, V) float32, as a verify gives
    allowed = np.random.default_rng(0).random(50) < 0.4
    for allow in (None, allowed):
        one, many = (SamplingPicker(temperature, rollout_streams(3, 4)) for _ in range(2))
        one.prepare(logits)
        many.prepare(logits)
        for index in range(3):
            want = [one.choose(row, index, allow) for row in (0, 2, 3)]
            assert many.choose_rows([0, 2, 3], index, allow) == want
        assert [one.upcoming(r, 2).tolist() for r in range(4)] == [
            many.upcoming(r, 2).tolist() for r in range(4)
        ]
