"""Answer ↔ token ids against a scaffold: `encode_answer` (training targets) and the strict
`parse_answer` (model output → `DrivingAnswer`).

Encoding fills each slot with the per-slot encoding of its text: the explanation padded with
the null token (cut at a word boundary when too long), meta words padded, numbers clamped to
the fixed width. What had to be cut or clamped is counted in the `EncodeReport`.

Parsing accepts exactly what encoding can produce: every structural token equal to the
scaffold, yes/no, one canonical encoding of a vocabulary word followed by nulls, sign and
digit tokens, explanation text followed only by nulls. Anything else raises
`ScaffoldParseError` naming the section and the slot. No recovery, no defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from blockplan.schema.answer import (
    AXES,
    DIGIT,
    LATERAL,
    LONGITUDINAL,
    SIGN,
    TEXT,
    YES_NO,
    escape_explanation,
    slot_texts,
)
from blockplan.schema.layout import Scaffold, Tokenizer
from blockplan.schema.scaffold import SlotSpan, SlotVocab, Template, template_for
from blockplan.schema.spec import DrivingSchema, SchemaError, format_number
from blockplan.types import DrivingAnswer, Lateral, Longitudinal


class ScaffoldParseError(ValueError):
    """Model output that violates the scaffold. `section` and `slot` name where."""

    def __init__(self, section: str, slot: str, message: str) -> None:
        super().__init__(f"{section}.{slot}: {message}")
        self.section = section
        self.slot = slot


@dataclass(frozen=True)
class EncodeReport:
    """What encoding one answer had to change.

    num_explanation_tokens: tokens of the full explanation before any cut.
    is_explanation_truncated: the explanation did not fit its budget and was cut.
    num_dropped_words: whitespace-separated words cut from the explanation's end.
    num_clamped: waypoint coordinates clamped to the representable range (±999.99).
    """

    num_explanation_tokens: int
    is_explanation_truncated: bool
    num_dropped_words: int
    num_clamped: int


def _encode_explanation(
    text: str, budget: int, tokenizer: Tokenizer, vocab: SlotVocab
) -> tuple[list[int], int, int]:
    """(ids, tokens before the cut, words dropped). Too long → the longest whitespace-word
    prefix that fits; if not even the first word fits, the longest character prefix."""

    def ids_of(s: str) -> list[int]:
        ids = tokenizer.encode(escape_explanation(s))
        special = [i for i in ids if i in vocab.special_ids]
        if special:
            raise SchemaError(f"explanation {s[:40]!r}… holds special-token text (ids {special})")
        return ids

    full = ids_of(text)
    if len(full) <= budget:
        return full, len(full), 0
    # Word ends: the prefix up to the end of word k (trailing spaces dropped).
    words = text.split()
    ends, pos = [], 0
    for w in words:
        pos = text.index(w, pos) + len(w)
        ends.append(pos)
    lo, hi = 0, len(ends) - 1  # find the largest k with ids_of(text[:ends[k]]) fitting
    best = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if len(ids_of(text[: ends[mid]])) <= budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best >= 0:
        return ids_of(text[: ends[best]]), len(full), len(words) - (best + 1)
    stripped = text.lstrip()
    for n in range(len(stripped), -1, -1):  # first word alone is too long: cut characters
        ids = ids_of(stripped[:n])
        if len(ids) <= budget:
            return ids, len(full), len(words)
    raise AssertionError("the empty explanation always fits")


def encode_answer(
    answer: DrivingAnswer, scaffold: Scaffold, tokenizer: Tokenizer, schema: DrivingSchema
) -> tuple[np.ndarray, EncodeReport]:
    """The answer as (A,) int64 token ids in the scaffold, and what had to be cut/clamped."""
    template = template_for(scaffold, schema, tokenizer)
    vocab = template.vocab
    texts, num_clamped = slot_texts(answer, schema)
    ids = template.token_ids.tolist()  # (A,), filled slot by slot
    num_tokens, num_dropped = 0, 0
    for span, text in zip(template.slots, texts, strict=True):
        kind = span.slot.kind
        if kind == TEXT:
            value, num_tokens, num_dropped = _encode_explanation(
                answer.explanation, span.length, tokenizer, vocab
            )
        elif kind in (SIGN, DIGIT):
            value = [vocab.char_ids[text]]
        else:
            value = list(vocab.word_ids[text])
        assert len(value) <= span.length, (span, value)
        ids[span.start : span.end] = value + [vocab.null_id] * (span.length - len(value))
    is_truncated = num_tokens > schema.explanation_budget
    return np.array(ids, dtype=np.int64), EncodeReport(
        num_tokens, is_truncated, num_dropped, num_clamped
    )


def write_waypoints(
    ids: np.ndarray,
    waypoints: np.ndarray,
    scaffold: Scaffold,
    tokenizer: Tokenizer,
    schema: DrivingSchema,
) -> tuple[np.ndarray, int]:
    """A copy of answer ids (A,) with the trajectory's sign and digit slots holding
    `waypoints` (5, 2) as the fixed-width numbers `encode_answer` writes (rounded to the
    schema's decimals, clamped to ±max), and how many coordinates were clamped. How a flow
    head's continuous waypoints enter the answer text (docs/ALGORITHMS.md §7.1); the strict
    parser then reads them back like any decoded answer. NaN raises `SchemaError`."""
    template = template_for(scaffold, schema, tokenizer)
    vocab = template.vocab
    waypoints = np.asarray(waypoints, dtype=np.float64)
    if waypoints.shape != (schema.num_waypoints, 2):
        raise SchemaError(
            f"waypoints shape {waypoints.shape}: expected ({schema.num_waypoints}, 2)"
        )
    chars: dict[str, list[str]] = {}
    num_clamped = 0
    for i in range(schema.num_waypoints):
        for a, axis in enumerate(AXES):
            number, is_clamped = format_number(float(waypoints[i, a]), schema)
            num_clamped += is_clamped
            sign = schema.sign_texts[number[0] == "-"]
            chars[f"waypoints[{i}].{axis}"] = [sign] + [c for c in number[1:] if c != "."]
    out = np.array(ids, dtype=np.int64, copy=True)
    for span in template.slots:
        if span.slot.kind not in (SIGN, DIGIT) or not span.slot.number.startswith("waypoints["):
            continue
        out[span.start] = vocab.char_ids[chars[span.slot.number].pop(0)]
    return out, num_clamped


def _until_null(values: list[int], vocab: SlotVocab, where: SlotSpan) -> list[int]:
    """The ids before the first null; every id after it must be null too."""
    n = values.index(vocab.null_id) if vocab.null_id in values else len(values)
    if any(i != vocab.null_id for i in values[n:]):
        raise ScaffoldParseError(
            where.slot.section, where.slot.name, f"non-null token after the padding: {values}"
        )
    return values[:n]


def _check_structure(ids: np.ndarray, template: Template, tokenizer: Tokenizer) -> None:
    bad = np.flatnonzero((ids != template.token_ids) & ~template.is_editable)
    if len(bad):
        i = int(bad[0])
        section = next(s.name for s in template.sections if s.start <= i < s.end)
        expected = tokenizer.decode([int(template.token_ids[i])])
        raise ScaffoldParseError(
            section,
            f"structure@{i}",
            f"structural token {int(ids[i])} ({tokenizer.decode([int(ids[i])])!r}) differs "
            f"from the scaffold's {int(template.token_ids[i])} ({expected!r})",
        )


def parse_answer(
    ids: np.ndarray | list[int], scaffold: Scaffold, tokenizer: Tokenizer, schema: DrivingSchema
) -> DrivingAnswer:
    """Strictly parse (A,) answer token ids into a `DrivingAnswer`."""
    template = template_for(scaffold, schema, tokenizer)
    vocab = template.vocab
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != len(scaffold) or not np.issubdtype(ids.dtype, np.integer):
        raise ScaffoldParseError(
            "answer", "ids", f"expected ({len(scaffold)},) integer ids, got {ids.shape} {ids.dtype}"
        )
    _check_structure(ids, template, tokenizer)
    values = ids.tolist()
    critical: dict[str, bool] = {}
    meta: dict[str, str] = {}
    explanation = ""
    numbers: dict[str, str] = {}
    for span in template.slots:
        slot = span.slot
        value = values[span.start : span.end]
        if vocab.mask_id in value:
            raise ScaffoldParseError(slot.section, slot.name, "slot still holds the mask token")
        if slot.kind == YES_NO:
            if value[0] not in vocab.yes_no:
                got = tokenizer.decode(value)
                raise ScaffoldParseError(slot.section, slot.name, f"expected yes/no, got {got!r}")
            critical[slot.name] = vocab.yes_no[value[0]]
        elif slot.kind in (SIGN, DIGIT):
            table = vocab.signs if slot.kind == SIGN else vocab.digits
            if value[0] not in table:
                got = tokenizer.decode(value)
                raise ScaffoldParseError(
                    slot.section,
                    slot.name,
                    f"malformed number: expected a {slot.kind}, got {got!r}",
                )
            numbers[slot.number] = numbers.get(slot.number, "") + table[value[0]]
        elif slot.kind in (LONGITUDINAL, LATERAL):
            words = vocab.longitudinal if slot.kind == LONGITUDINAL else vocab.lateral
            word_ids = tuple(_until_null(value, vocab, span))
            if word_ids not in words:
                raise ScaffoldParseError(
                    slot.section,
                    slot.name,
                    f"{tokenizer.decode(list(word_ids))!r} is not in the {slot.kind} "
                    f"vocabulary {sorted(words.values())}",
                )
            meta[slot.kind] = words[word_ids]
        else:
            assert slot.kind == TEXT, slot
            explanation = _parse_explanation(value, vocab, tokenizer, span)
    return DrivingAnswer(
        critical_objects={k: critical[k] for k in schema.critical_object_keys},
        explanation=explanation,
        longitudinal=Longitudinal(meta[LONGITUDINAL]),
        lateral=Lateral(meta[LATERAL]),
        waypoints=_waypoints(numbers, schema),
    )


def _parse_explanation(
    value: list[int], vocab: SlotVocab, tokenizer: Tokenizer, span: SlotSpan
) -> str:
    text_ids = _until_null(value, vocab, span)
    special = [i for i in text_ids if i in vocab.special_ids]
    if special:
        raise ScaffoldParseError(
            span.slot.section, span.slot.name, f"special token ids {special} inside the text"
        )
    escaped = tokenizer.decode(text_ids)
    try:
        text = json.loads(f'"{escaped}"')
    except json.JSONDecodeError as e:
        raise ScaffoldParseError(
            span.slot.section, span.slot.name, f"not valid JSON string content: {e}"
        ) from e
    return text


def _waypoints(numbers: dict[str, str], schema: DrivingSchema) -> np.ndarray:
    """(5, 2) from the sign+digit strings gathered per number."""
    out = np.empty((schema.num_waypoints, 2), dtype=np.float64)
    scale = 10.0**schema.frac_digits
    for i in range(schema.num_waypoints):
        for a, axis in enumerate(AXES):
            chars = numbers[f"waypoints[{i}].{axis}"]
            sign, digits = chars[0], chars[1:]
            magnitude = int(digits) / scale
            out[i, a] = -magnitude if sign == "-" else magnitude
    return out
