"""Answer constraints: any left-to-right choice within the allowed sets parses."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.decoding.constraints import build_constraints
from blockplan.schema import compile_scaffold, default_schema, default_tokenizer, parse_answer


@pytest.fixture(scope="module")
def setup():
    schema, tokenizer = default_schema(), default_tokenizer()
    scaffold = compile_scaffold(schema, tokenizer, 32)
    return schema, tokenizer, scaffold, build_constraints(scaffold, schema, tokenizer, 800)


def test_random_choices_within_the_constraints_always_parse(setup):
    schema, tokenizer, scaffold, constraints = setup
    assert constraints.static.shape == (len(scaffold), 800)
    assert not constraints.static[:, 768:].any()  # ids beyond the tokenizer never allowed
    assert not constraints.static[:, scaffold.mask_id].any()
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ids = np.asarray(scaffold.token_ids).copy()
        for p in np.flatnonzero(scaffold.is_editable):
            allowed = np.flatnonzero(constraints.allowed(int(p), ids))
            assert len(allowed) >= 1
            ids[p] = rng.choice(allowed)
        parse_answer(ids, scaffold, tokenizer, schema)  # raises on any violation


def test_meta_slot_spells_a_word_then_pads(setup):
    schema, tokenizer, scaffold, constraints = setup
    grammar = next(g for g in constraints.grammar_at.values() if g.words is not None)
    ids = np.asarray(scaffold.token_ids).copy()
    first = np.flatnonzero(constraints.allowed(grammar.start, ids))
    assert set(first) == {w[0] for w in grammar.words}
    word = min(grammar.words, key=len)
    ids[grammar.start : grammar.start + len(word)] = word
    after = np.flatnonzero(constraints.allowed(grammar.start + len(word), ids))
    longer = {w[len(word)] for w in grammar.words if len(w) > len(word) and w[: len(word)] == word}
    assert set(after) == {scaffold.null_id} | longer
    known = np.zeros(len(scaffold), dtype=bool)
    assert constraints.is_eligible(grammar.start, known)
    assert not constraints.is_eligible(grammar.start + 1, known)
