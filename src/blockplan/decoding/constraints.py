"""Which token each editable answer slot may take, so every decoded answer parses.

The schema's strict parser rejects, e.g., a digit slot holding a letter or a meta word that
is not in its vocabulary. Decoding under these constraints makes every output parse, even
from an untrained model; a trained model rarely needs them, and greedy AR and scaffold spec
apply them identically, so their token-for-token equality is kept.

Single-token slots (yes/no, sign, digit) have a fixed allowed set. Multi-token slots have a
small grammar, decided left to right inside the slot: the explanation is JSON-safe text
tokens, then only padding once a pad appeared; a meta slot spells one vocabulary word token
by token, then pads. The diffusion strategies, which fill slots out of order, may only fill
the leftmost unknown position of a multi-token slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from blockplan.schema.action import ActionSchema, action_vocab
from blockplan.schema.answer import DIGIT, LATERAL, LONGITUDINAL, SIGN, TEXT, YES_NO
from blockplan.schema.layout import Scaffold, Tokenizer
from blockplan.schema.scaffold import template_for
from blockplan.schema.spec import DrivingSchema, SchemaError


@dataclass(frozen=True)
class SlotGrammar:
    """One multi-token slot at answer positions [start, end).

    words: allowed id sequences (meta words), or None for free text over `text_ids`.
    """

    start: int
    end: int
    pad_id: int
    words: tuple[tuple[int, ...], ...] | None
    text_ids: np.ndarray | None  # (V,) bool


class AnswerConstraints:
    """static (A, V) bool: every token a position may ever hold (structural positions: their
    own token). `allowed` refines it from the slot's earlier tokens."""

    def __init__(self, static: np.ndarray, grammars: tuple[SlotGrammar, ...]) -> None:
        self.static = static
        self.static_tensor = torch.as_tensor(static)
        self.static_banned = ~static  # (A, V): what the draft masks out, made once
        self._static_on: dict[torch.device, torch.Tensor] = {}
        self.grammar_at: dict[int, SlotGrammar] = {
            p: g for g in grammars for p in range(g.start, g.end)
        }

    def static_on(self, device: torch.device) -> torch.Tensor:
        """`static_tensor` on `device` (copied there once)."""
        if device.type == "cpu":
            return self.static_tensor
        if device not in self._static_on:
            self._static_on[device] = self.static_tensor.to(device)
        return self._static_on[device]

    def is_eligible(self, position: int, known: np.ndarray) -> bool:
        """May `position` be decided now, given which positions (A,) are known?"""
        g = self.grammar_at.get(position)
        return g is None or bool(known[g.start : position].all())

    def allowed(self, position: int, tokens: np.ndarray) -> np.ndarray:
        """(V,) bool for `position`, given the answer row's tokens before it."""
        g = self.grammar_at.get(position)
        if g is None:
            return self.static[position]
        before = tuple(int(t) for t in tokens[g.start : position])
        out = np.zeros_like(self.static[position])
        if g.pad_id in before:
            out[g.pad_id] = True  # padding runs to the end of the slot
            return out
        if g.words is None:
            out[:] = g.text_ids
            out[g.pad_id] = True
            return out
        n = len(before)
        for word in g.words:
            if word[:n] == before:
                if len(word) > n:
                    out[word[n]] = True
                else:
                    out[g.pad_id] = True  # the word is complete
        return out


def build_constraints(
    scaffold: Scaffold, schema: DrivingSchema, tokenizer: Tokenizer, vocab_size: int
) -> AnswerConstraints:
    """The constraints of the schema's answer template for a model with `vocab_size` logits."""
    template = template_for(scaffold, schema, tokenizer)
    vocab = template.vocab
    A = len(scaffold)
    static = np.zeros((A, vocab_size), dtype=bool)
    static[np.flatnonzero(~scaffold.is_editable), scaffold.token_ids[~scaffold.is_editable]] = True
    text_ids = _json_safe_text_ids(tokenizer, vocab.special_ids, vocab_size)
    grammars = []
    for span in template.slots:
        rows = slice(span.start, span.end)
        kind = span.slot.kind
        if kind == YES_NO:
            static[rows, list(vocab.yes_no)] = True
        elif kind == SIGN:
            static[rows, list(vocab.signs)] = True
        elif kind == DIGIT:
            static[rows, list(vocab.digits)] = True
        elif kind in (LONGITUDINAL, LATERAL):
            words = tuple(vocab.longitudinal if kind == LONGITUDINAL else vocab.lateral)
            static[rows, [i for w in words for i in w]] = True
            static[rows, vocab.null_id] = True
            grammars.append(SlotGrammar(span.start, span.end, vocab.null_id, words, None))
        else:
            assert kind == TEXT, kind
            static[rows] = text_ids
            static[rows, vocab.null_id] = True
            grammars.append(SlotGrammar(span.start, span.end, vocab.null_id, None, text_ids))
    return AnswerConstraints(static, tuple(grammars))


def _json_safe_text_ids(
    tokenizer: Tokenizer, special: frozenset[int], vocab_size: int
) -> np.ndarray:
    """(V,) bool: non-special tokens whose text cannot break a JSON string (no quote,
    backslash or control character)."""
    out = np.zeros(vocab_size, dtype=bool)
    for i in range(min(vocab_size, tokenizer.vocab_size)):
        if i in special:
            continue
        text = tokenizer.decode([i])
        out[i] = bool(text) and not any(c in '"\\' or ord(c) < 0x20 for c in text)
    return out


def build_action_constraints(
    scaffold: Scaffold, schema: ActionSchema, tokenizer: Tokenizer, vocab_size: int
) -> AnswerConstraints:
    """The robot answer's constraints: each value slot holds a bin token, each structural
    position its own token (`schema/action/`); no multi-token slots."""
    vocab = action_vocab(schema, tokenizer)
    if vocab.bin_offset + vocab.num_bins > vocab_size:
        raise SchemaError(
            f"bin_token_offset: bin tokens [{vocab.bin_offset}, {vocab.bin_offset + vocab.num_bins}) do not fit a "
            f"model with {vocab_size} logits"
        )
    editable = np.asarray(scaffold.is_editable)
    static = np.zeros((len(scaffold), vocab_size), dtype=bool)
    static[np.flatnonzero(~editable), scaffold.token_ids[~editable]] = True
    static[np.ix_(np.flatnonzero(editable), vocab.bin_ids)] = True
    return AnswerConstraints(static, ())
