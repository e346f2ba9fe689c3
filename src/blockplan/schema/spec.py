"""The driving schema as data: what the answer and the prompt hold, and their budgets.

The answer is a JSON object with four sections in causal order (docs/ALGORITHMS.md §2):

* `critical_objects`: the 12 keys of `CRITICAL_OBJECT_KEYS`, each `"yes"` or `"no"`;
* `explanation`: free text, `explanation_budget` tokens, padded with `<|NULL|>`;
* `future_meta_behavior`: `longitudinal` and `lateral`, each a word of a closed vocabulary
  padded with `<|NULL|>` to `meta_budget` tokens. The vocabularies are the enums of
  `blockplan.types`:

  - longitudinal (`Longitudinal`): `keep` (hold the current speed), `accelerate`,
    `decelerate`, `stop` (come to / stay at standstill);
  - lateral (`Lateral`): `lane_follow` (follow the current lane, also through curves),
    `lane_change_left`, `lane_change_right`, `turn_left`, `turn_right` (at a junction),
    `straight` (go straight through a junction);

* `trajectory`: 5 waypoints `[x, y]` at t = 1..5 s in metres in the ego frame at
  t0, each number fixed-width: a sign, `int_digits` integer digits, a structural `.` and
  `frac_digits` decimals (`+014.70`). So every number has a fixed number of value tokens.

The prompt holds `system_text`, the camera listing and images, the navigation command (one
of `route_commands`) and `num_history` ego states `history_period_s` apart, ending at t0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blockplan.errors import UserError
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    DEFAULT_ROUTE_COMMAND,
    NUM_WAYPOINTS,
    Lateral,
    Longitudinal,
)

DEFAULT_SYSTEM_TEXT = (
    "You are the planner of an autonomous vehicle. From the camera images, the navigation "
    "command and the ego history, answer in JSON: the critical objects (yes or no), a short "
    "explanation, the future meta behavior (longitudinal, lateral) and 5 waypoints [x, y] in "
    "metres at t = 1..5 s in the ego frame at t0 (x forward, y left)."
)

# Navigation commands the prompt accepts (docs/DESIGN.md §4, /planning/route_command).
DEFAULT_ROUTE_COMMANDS: tuple[str, ...] = (
    DEFAULT_ROUTE_COMMAND,
    "straight",
    "turn_left",
    "turn_right",
    "lane_change_left",
    "lane_change_right",
)


class SchemaError(UserError, ValueError):
    """A schema setting, a tokenizer that cannot represent the schema, or a value that does
    not fit it; the message names the field or slot."""


@dataclass(frozen=True)
class DrivingSchema:
    """Everything that fixes the answer template and the prompt format.

    explanation_budget: explanation tokens (Fast-dDrive uses 192; our reference model 24).
    meta_budget: tokens per meta-behaviour word (padded with the null token).
    int_digits / frac_digits: fixed-width number format of waypoints and ego history.
    Token names are the literal texts of special tokens, looked up in the tokenizer by name.
    """

    explanation_budget: int = 24
    meta_budget: int = 3
    int_digits: int = 3
    frac_digits: int = 2
    critical_object_keys: tuple[str, ...] = CRITICAL_OBJECT_KEYS
    yes_word: str = "yes"
    no_word: str = "no"
    num_history: int = 7
    history_period_s: float = 0.5
    route_commands: tuple[str, ...] = DEFAULT_ROUTE_COMMANDS
    system_text: str = DEFAULT_SYSTEM_TEXT
    mask_token: str = "<|MASK|>"
    null_token: str = "<|NULL|>"
    im_start_token: str = "<|im_start|>"
    im_end_token: str = "<|im_end|>"
    vision_start_token: str = "<|vision_start|>"
    image_pad_token: str = "<|image_pad|>"
    vision_end_token: str = "<|vision_end|>"
    # Fast-dDrive's text, written so that encoding it piece by piece (as the scaffold does)
    # gives the ids a Qwen2 byte-level BPE gives the whole text: a space before every
    # trajectory number (`[[ +014.70, -000.04], ...]`), so the sign is always its own piece
    # (` +` / ` -`, the sign slot's tokens) and never merges with a bracket; and the comma
    # between two sections ends the earlier section (`"},` is one BPE piece).
    bpe_aligned: bool = False

    def __post_init__(self) -> None:
        for name in ("critical_object_keys", "route_commands"):  # JSON gives lists
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        # upper bounds: plausibility (the scaffold and its constraint masks scale with them)
        for name, limit in (
            ("explanation_budget", 4096),
            ("meta_budget", 64),
            ("num_history", 256),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise SchemaError(
                    f"DrivingSchema.{name}={value!r}: must be an integer in [1, {limit}]"
                )
        if not isinstance(self.bpe_aligned, bool):
            raise SchemaError(
                f"DrivingSchema.bpe_aligned={self.bpe_aligned!r}: must be true or false"
            )
        for name in ("int_digits", "frac_digits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 6:
                raise SchemaError(f"DrivingSchema.{name}={value!r}: must be an integer in [0, 6]")
        if self.int_digits + self.frac_digits < 1:
            raise SchemaError("DrivingSchema.int_digits + frac_digits must be >= 1")
        if not self.history_period_s > 0:
            raise SchemaError(
                f"DrivingSchema.history_period_s={self.history_period_s!r}: must be > 0"
            )
        if set(self.critical_object_keys) != set(CRITICAL_OBJECT_KEYS) or len(
            self.critical_object_keys
        ) != len(CRITICAL_OBJECT_KEYS):
            raise SchemaError(
                f"DrivingSchema.critical_object_keys={self.critical_object_keys!r}: must be an "
                f"ordering of {list(CRITICAL_OBJECT_KEYS)}"
            )
        if not self.yes_word or not self.no_word or self.yes_word == self.no_word:
            raise SchemaError(
                f"DrivingSchema.yes_word/no_word={self.yes_word!r}/{self.no_word!r}: must be "
                "two different non-empty words"
            )
        if not self.route_commands or len(set(self.route_commands)) != len(self.route_commands):
            raise SchemaError(
                f"DrivingSchema.route_commands={self.route_commands!r}: must be non-empty, unique"
            )
        check_special_tokens(self, "DrivingSchema")

    @property
    def num_waypoints(self) -> int:
        """Waypoints of the trajectory section (t = 1..5 s, as `DrivingAnswer` holds)."""
        return NUM_WAYPOINTS

    @property
    def longitudinal_words(self) -> tuple[str, ...]:
        """The longitudinal vocabulary (the values of `Longitudinal`)."""
        return tuple(v.value for v in Longitudinal)

    @property
    def lateral_words(self) -> tuple[str, ...]:
        """The lateral vocabulary (the values of `Lateral`)."""
        return tuple(v.value for v in Lateral)

    @property
    def special_token_names(self) -> tuple[str, ...]:
        """The special tokens the schema uses, by name."""
        return (
            self.mask_token,
            self.null_token,
            self.im_start_token,
            self.im_end_token,
            self.vision_start_token,
            self.image_pad_token,
            self.vision_end_token,
        )

    @property
    def sign_texts(self) -> tuple[str, str]:
        """The texts of the trajectory's sign slot for + and -."""
        lead = " " if self.bpe_aligned else ""
        return (lead + "+", lead + "-")

    @property
    def number_width(self) -> int:
        """Characters of one fixed-width number: sign, digits and (if any decimals) a point."""
        return 1 + self.int_digits + self.frac_digits + (1 if self.frac_digits else 0)

    @property
    def max_abs_number(self) -> float:
        """The largest representable magnitude, e.g. 999.99 for 3 + 2 digits."""
        return (10**self.int_digits - 1) + (1 - 10.0**-self.frac_digits)


def schema_to_dict(schema: DrivingSchema) -> dict[str, Any]:
    """The schema as JSON-ready data (for a model's config.json)."""
    return {f.name: (list(v) if isinstance(v, tuple) else v) for f, v in _items(schema)}


def schema_from_dict(data: Mapping[str, Any]) -> DrivingSchema:
    """The inverse of `schema_to_dict`; missing keys keep their defaults, unknown keys raise
    SchemaError naming the key."""
    names = {f.name for f in dataclasses.fields(DrivingSchema)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise SchemaError(f"unknown schema key {unknown[0]!r} (known: {sorted(names)})")
    try:
        return DrivingSchema(**data)
    except TypeError as e:  # e.g. a list where a number belongs
        raise SchemaError(f"bad schema data: {e}") from e


def _items(schema: DrivingSchema):
    return ((f, getattr(schema, f.name)) for f in dataclasses.fields(schema))


def default_schema() -> DrivingSchema:
    """The schema of our reference model."""
    return DrivingSchema()


def fastddrive_schema(**overrides: Any) -> DrivingSchema:
    """The Fast-dDrive answer format of its published checkpoints: a 192-token explanation,
    the `|<MASK>|` mask token of Fast-dLLM / Fast-dVLM, BPE-aligned text (spaced numbers)."""
    settings: dict[str, Any] = dict(explanation_budget=192, mask_token="|<MASK>|", bpe_aligned=True)
    settings.update(overrides)
    return DrivingSchema(**settings)


def format_number(value: float, schema: DrivingSchema) -> tuple[str, bool]:
    """`value` as a fixed-width number (`+014.70`) and whether it had to be clamped.

    Rounds to `frac_digits` decimals (zero is always `+`), then clamps to ±max_abs_number; +inf/-inf clamp too.
    NaN raises SchemaError (it has no representable neighbour).
    """
    if value != value:  # NaN
        raise SchemaError("number is NaN: not representable")
    limit = schema.max_abs_number
    rounded = round(value, schema.frac_digits) if abs(value) < 1e300 else value
    is_clamped = abs(rounded) > limit
    clamped = max(-limit, min(limit, rounded)) + 0.0  # + 0.0 turns -0.0 into +0.0
    text = f"{clamped:+0{schema.number_width}.{schema.frac_digits}f}"
    assert len(text) == schema.number_width, text
    return text, is_clamped


def check_special_tokens(schema: object, what: str) -> None:
    """Every `*_token` field of `schema` names a different, non-empty token; the error names
    the first field at fault."""
    seen: dict[str, str] = {}
    for f in dataclasses.fields(schema):  # type: ignore[arg-type]
        if not f.name.endswith("_token"):
            continue
        value = getattr(schema, f.name)
        if not isinstance(value, str) or not value:
            raise SchemaError(f"{what} special tokens: {f.name}={value!r}: must not be empty")
        if value in seen:
            raise SchemaError(
                f"{what} special tokens: {f.name}={value!r}: the same token as {seen[value]}"
            )
        seen[value] = f.name
