"""The scaffold compiler: schema + tokenizer + block size d → an immutable `Scaffold`.

Literals of `answer_pieces` are tokenized one piece at a time and frozen (structural
positions); every slot gets a fixed number of editable positions holding the mask token.
So the answer's token sequence is the concatenation of per-piece encodings — the same in
training (`encode_answer`) and decoding — and its length never depends on the values.

Blocks (docs/ALGORITHMS.md §2): section s with |E_s| editable positions gets n_s = ceil(|E_s| / d)
blocks, each holding at most d editable positions. The first block of a section starts at the
section start; every later block starts at its first editable position, so the structural
tokens after a block's last editable position stay in that block. A block therefore always
ends right before an editable position (or at the section end), and the causal forward that
closes a block predicts the next block's first value token. Blocks never straddle sections;
a block may be longer than d because structural tokens ride along.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from blockplan.schema.answer import (
    DIGIT,
    DIGITS,
    LATERAL,
    LONGITUDINAL,
    SIGN,
    SIGNS,
    TEXT,
    YES_NO,
    Slot,
    answer_pieces,
)
from blockplan.schema.layout import SECTION_NAMES, Block, Scaffold, Section, Tokenizer
from blockplan.schema.spec import DrivingSchema, SchemaError


@dataclass(frozen=True)
class SlotSpan:
    """Where one slot lives in the answer: positions [start, start + length)."""

    slot: Slot
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class SlotVocab:
    """Token ids the value slots may hold, looked up by name once per schema + tokenizer."""

    mask_id: int
    null_id: int
    special_ids: frozenset[int]
    yes_no: dict[int, bool]
    signs: dict[int, str]
    digits: dict[int, str]
    longitudinal: dict[tuple[int, ...], str]
    lateral: dict[tuple[int, ...], str]
    char_ids: dict[str, int]  # sign slot text / digit character -> its single id
    word_ids: dict[str, tuple[int, ...]]  # yes/no and meta words -> their ids


@dataclass(frozen=True)
class Template:
    """The answer template of one schema + tokenizer, before the block partition."""

    token_ids: np.ndarray  # (A,) int64, mask id at editable positions
    is_editable: np.ndarray  # (A,) bool
    sections: tuple[Section, ...]
    slots: tuple[SlotSpan, ...]
    vocab: SlotVocab


def _single_id(tokenizer: Tokenizer, text: str, what: str) -> int:
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise SchemaError(f"{what} {text!r} must be one token, the tokenizer gives {ids}")
    return ids[0]


def _slot_vocab(schema: DrivingSchema, tokenizer: Tokenizer) -> SlotVocab:
    try:
        special_ids = {name: tokenizer.token_id(name) for name in schema.special_token_names}
    except KeyError as e:
        raise SchemaError(f"tokenizer lacks a special token the schema needs: {e}") from e
    yes = _single_id(tokenizer, schema.yes_word, "critical_objects value")
    no = _single_id(tokenizer, schema.no_word, "critical_objects value")
    # sign slot text (" +" with spaced numbers) / digit -> its single id
    char_ids = {c: _single_id(tokenizer, c, "number character") for c in schema.sign_texts + DIGITS}
    word_ids = {schema.yes_word: (yes,), schema.no_word: (no,)}
    meta: dict[str, dict[tuple[int, ...], str]] = {}
    for kind, words in ((LONGITUDINAL, schema.longitudinal_words), (LATERAL, schema.lateral_words)):
        meta[kind] = {}
        for word in words:
            ids = tuple(tokenizer.encode(word))
            if not 1 <= len(ids) <= schema.meta_budget:
                raise SchemaError(
                    f"future_meta_behavior.{kind} word {word!r} is {len(ids)} tokens; "
                    f"meta_budget is {schema.meta_budget}"
                )
            meta[kind][ids] = word
            word_ids[word] = ids
    if len(set(char_ids.values())) != len(char_ids) or yes == no:
        raise SchemaError("tokenizer maps two different value characters/words to one id")
    return SlotVocab(
        mask_id=special_ids[schema.mask_token],
        null_id=special_ids[schema.null_token],
        special_ids=frozenset(special_ids.values()),
        yes_no={yes: True, no: False},
        signs={char_ids[t]: c for t, c in zip(schema.sign_texts, SIGNS, strict=True)},
        digits={char_ids[c]: c for c in DIGITS},
        longitudinal=meta[LONGITUDINAL],
        lateral=meta[LATERAL],
        char_ids=char_ids,
        word_ids=word_ids,
    )


def _slot_length(kind: str, schema: DrivingSchema) -> int:
    if kind == TEXT:
        return schema.explanation_budget
    if kind in (LONGITUDINAL, LATERAL):
        return schema.meta_budget
    assert kind in (YES_NO, SIGN, DIGIT), kind
    return 1


@functools.lru_cache(maxsize=32)
def compile_template(schema: DrivingSchema, tokenizer: Tokenizer) -> Template:
    """Tokenize the answer template (cached per schema + tokenizer object)."""
    vocab = _slot_vocab(schema, tokenizer)
    ids: list[int] = []
    editable: list[bool] = []
    slots: list[SlotSpan] = []
    section_bounds: dict[str, list[int]] = {}
    for piece in answer_pieces(schema):
        start = len(ids)
        if isinstance(piece, Slot):
            length = _slot_length(piece.kind, schema)
            ids += [vocab.mask_id] * length
            editable += [True] * length
            slots.append(SlotSpan(piece, start, length))
        else:
            piece_ids = tokenizer.encode(piece.text)
            if any(i in vocab.special_ids for i in piece_ids):
                raise SchemaError(f"{piece.section} literal {piece.text!r} holds a special token")
            ids += piece_ids
            editable += [False] * len(piece_ids)
        bounds = section_bounds.setdefault(piece.section, [start, len(ids)])
        bounds[1] = len(ids)
    assert tuple(section_bounds) == SECTION_NAMES, tuple(section_bounds)
    is_editable = np.array(editable, dtype=bool)
    sections = tuple(
        Section(name, start, end, int(is_editable[start:end].sum()))
        for name, (start, end) in section_bounds.items()
    )
    token_ids = np.array(ids, dtype=np.int64)
    token_ids.setflags(write=False)
    is_editable.setflags(write=False)
    return Template(token_ids, is_editable, sections, tuple(slots), vocab)


def partition_blocks(
    sections: tuple[Section, ...], is_editable: np.ndarray, block_size: int
) -> tuple[Block, ...]:
    """Blocks aligned to section starts, at most `block_size` editable positions each."""
    blocks: list[Block] = []
    for s in sections:
        positions = np.flatnonzero(is_editable[s.start : s.end]) + s.start
        num_blocks = math.ceil(len(positions) / block_size)
        assert num_blocks >= 1, f"section {s.name} has no editable positions"
        starts = [s.start] + [int(positions[k * block_size]) for k in range(1, num_blocks)]
        ends = starts[1:] + [s.end]
        blocks += [Block(a, b, s.name) for a, b in zip(starts, ends, strict=True)]
    return tuple(blocks)


def compile_scaffold(schema: DrivingSchema, tokenizer: Tokenizer, block_size: int) -> Scaffold:
    """The full answer template as token ids, its editable slots and its block partition."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise SchemaError(f"block_size={block_size!r}: must be an integer >= 1")
    template = compile_template(schema, tokenizer)
    return Scaffold(
        token_ids=template.token_ids,
        is_editable=template.is_editable,
        sections=template.sections,
        blocks=partition_blocks(template.sections, template.is_editable, block_size),
        block_size=block_size,
        mask_id=template.vocab.mask_id,
        null_id=template.vocab.null_id,
    )


def template_for(scaffold: Scaffold, schema: DrivingSchema, tokenizer: Tokenizer) -> Template:
    """The template behind `scaffold`; raises SchemaError if it was compiled from another
    schema or tokenizer."""
    template = compile_template(schema, tokenizer)
    if len(scaffold) != len(template.token_ids) or not np.array_equal(
        scaffold.token_ids, template.token_ids
    ):
        raise SchemaError("scaffold does not match this schema + tokenizer")
    return template


def section_index(scaffold: Scaffold) -> np.ndarray:
    """(A,) int64: the index in `SECTION_NAMES` of each answer position's section."""
    out = np.empty(len(scaffold), dtype=np.int64)
    for s in scaffold.sections:
        out[s.start : s.end] = SECTION_NAMES.index(s.name)
    return out
