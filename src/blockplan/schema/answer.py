"""The answer text as a sequence of pieces: fixed literals and value slots.

One description serves three consumers: `render_answer_text` fills the slots with text (the
JSON answer in Fast-dDrive format), the scaffold compiler tokenizes the literals and reserves
a fixed number of tokens per slot, and the codec fills / reads the slots as token ids.

    {"critical_objects": {"nearby_vehicle": "yes", ..., "door_opening_vehicle": "no"},
     "explanation": "...", "future_meta_behavior": {"longitudinal": "keep",
     "lateral": "lane_follow"}, "trajectory": [[+014.70, +000.12], ..., [+070.00, -003.50]]}

(on one line). Numbers are fixed-width (`+014.70`): exact in token count, not strict JSON.
Each section's pieces start with its own separator and key, so a section boundary is always
a piece boundary, hence a token boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from blockplan.schema.layout import SECTION_NAMES
from blockplan.schema.spec import DrivingSchema, format_number
from blockplan.types import DrivingAnswer

# Slot kinds and what they hold.
YES_NO = "yes_no"  # one token: schema.yes_word or schema.no_word
TEXT = "text"  # explanation_budget tokens of free text, padded with the null token
LONGITUDINAL = "longitudinal"  # meta_budget tokens: a Longitudinal word, null-padded
LATERAL = "lateral"  # meta_budget tokens: a Lateral word, null-padded
SIGN = "sign"  # one token: "+" or "-" (" +" or " -" with `schema.bpe_aligned`)
DIGIT = "digit"  # one token: "0".."9"

SIGNS = ("+", "-")
DIGITS = tuple("0123456789")
AXES = ("x", "y")


@dataclass(frozen=True)
class Literal:
    """Fixed text of the answer (keys, quotes, brackets, commas, a number's point)."""

    section: str
    text: str


@dataclass(frozen=True)
class Slot:
    """A value slot: `name` says where it is (e.g. `waypoints[2].y[3]`), `kind` what it holds,
    `number` which fixed-width number a sign/digit slot belongs to (e.g. `waypoints[2].y`)."""

    section: str
    name: str
    kind: str
    number: str = ""


def _number_pieces(section: str, name: str, schema: DrivingSchema) -> list[Literal | Slot]:
    """A fixed-width number: sign slot, integer digit slots, literal point, decimal slots."""
    pieces: list[Literal | Slot] = [Slot(section, f"{name}.sign", SIGN, name)]
    for k in range(schema.int_digits):
        pieces.append(Slot(section, f"{name}[{k}]", DIGIT, name))
    if schema.frac_digits:
        pieces.append(Literal(section, "."))
        for k in range(schema.int_digits, schema.int_digits + schema.frac_digits):
            pieces.append(Slot(section, f"{name}[{k}]", DIGIT, name))
    return pieces


def answer_pieces(schema: DrivingSchema) -> tuple[Literal | Slot, ...]:
    """The answer template, section by section in causal order; adjacent literals of one
    section are merged."""
    co, ex, mb, tr = SECTION_NAMES
    raw: list[Literal | Slot] = []
    for i, key in enumerate(schema.critical_object_keys):
        lead = '{"critical_objects": {"' if i == 0 else ', "'
        raw += [Literal(co, f'{lead}{key}": "'), Slot(co, key, YES_NO), Literal(co, '"')]
    # BPE-aligned: the comma between sections ends the earlier one (`"},` is one BPE piece)
    end, lead = (",", " ") if schema.bpe_aligned else ("", ", ")
    raw.append(Literal(co, "}" + end))
    raw += [
        Literal(ex, f'{lead}"explanation": "'),
        Slot(ex, "explanation", TEXT),
        Literal(ex, '"' + end),
    ]
    raw += [
        Literal(mb, f'{lead}"future_meta_behavior": {{"longitudinal": "'),
        Slot(mb, "longitudinal", LONGITUDINAL),
        Literal(mb, '", "lateral": "'),
        Slot(mb, "lateral", LATERAL),
        Literal(mb, '"}' + end),
    ]
    raw.append(Literal(tr, f'{lead}"trajectory": ['))
    # BPE-aligned numbers carry their leading space in the sign slot: `[ +014.70, -000.04]`
    between = "," if schema.bpe_aligned else ", "
    for i in range(schema.num_waypoints):
        raw.append(Literal(tr, "[" if i == 0 else ", ["))
        raw += _number_pieces(tr, f"waypoints[{i}].x", schema)
        raw.append(Literal(tr, between))
        raw += _number_pieces(tr, f"waypoints[{i}].y", schema)
        raw.append(Literal(tr, "]"))
    raw.append(Literal(tr, "]}"))
    merged: list[Literal | Slot] = []
    for piece in raw:
        prev = merged[-1] if merged else None
        if (
            isinstance(piece, Literal)
            and isinstance(prev, Literal)
            and prev.section == piece.section
        ):
            merged[-1] = Literal(piece.section, prev.text + piece.text)
        else:
            merged.append(piece)
    return tuple(merged)


def escape_explanation(text: str) -> str:
    """The explanation as JSON string content (without the quotes)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def slot_texts(answer: DrivingAnswer, schema: DrivingSchema) -> tuple[list[str], int]:
    """The text of every slot of `answer_pieces(schema)`, in order, and how many numbers had
    to be clamped to the representable range. The explanation is JSON-escaped, not cut."""
    texts: list[str] = []
    num_clamped = 0
    for key in schema.critical_object_keys:
        texts.append(schema.yes_word if answer.critical_objects[key] else schema.no_word)
    texts.append(escape_explanation(answer.explanation))
    texts += [answer.longitudinal.value, answer.lateral.value]
    waypoints = np.asarray(answer.waypoints, dtype=np.float64)  # (5, 2)
    for i in range(schema.num_waypoints):
        for a, axis in enumerate(AXES):
            value = float(waypoints[i, a])
            if value != value:
                raise ValueError(f"trajectory.waypoints[{i}].{axis} is NaN")
            number, is_clamped = format_number(value, schema)
            num_clamped += is_clamped
            texts.append(schema.sign_texts[number[0] == "-"])  # sign
            texts += [c for c in number[1:] if c != "."]
    return texts, num_clamped


def render_answer_text(answer: DrivingAnswer, schema: DrivingSchema) -> str:
    """The answer as JSON text in Fast-dDrive format (numbers clamped to the fixed width; the
    explanation is written whole, the token budget applies only to `encode_answer`)."""
    texts, _ = slot_texts(answer, schema)
    values = iter(texts)
    out = [p.text if isinstance(p, Literal) else next(values) for p in answer_pieces(schema)]
    assert next(values, None) is None, "slot count mismatch"
    return "".join(out)
