"""The action schema: the chunk's shape, its value ranges and bins, the quantization of
values to bin tokens, and its config.json form (the package docstring says how it reads)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockplan.schema.layout import Tokenizer
from blockplan.schema.spec import SchemaError, check_special_tokens

ACTION_SECTION = "actions"
# The default cameras of a robot: a fixed view of the scene and the wrist camera.
ROBOT_CAMERAS: tuple[str, ...] = ("front", "wrist")
DEFAULT_ROBOT_SYSTEM_TEXT = (
    "You are the policy of a robot arm. From the camera images, the instruction and the "
    "proprioceptive state, answer with the next action chunk."
)
CHUNK_OPEN, STEP_SEPARATOR, CHUNK_CLOSE = '{"actions": [[', "], [", "]]}"


def _floats(value: Any, where: str) -> tuple[float, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        raise SchemaError(f"ActionSchema.{where}={value!r}: must be a list of numbers")
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError) as e:
        raise SchemaError(f"ActionSchema.{where}={value!r}: must be a list of numbers") from e


@dataclass(frozen=True)
class ActionSchema:
    """Everything that fixes the action answer and the robot prompt.

    horizon H: timesteps per chunk. action_dim D: values per timestep. num_bins K: bins per
    value. action_low / action_high: (D,) per-dimension range the bins cover (empty: [-1, 1]
    for every dimension); values outside are clipped to the first / last bin. proprio_dim S,
    proprio_low / proprio_high: the same for the state in the prompt (S = 0: no state).
    instruction_budget: tokens of the language instruction (cut, then null-padded).
    bin_token_offset: the id of bin 0 (None: the tokenizer's vocab_size).
    """

    horizon: int = 8
    action_dim: int = 7
    num_bins: int = 256
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    proprio_dim: int = 8
    proprio_low: tuple[float, ...] = ()
    proprio_high: tuple[float, ...] = ()
    instruction_budget: int = 16
    bin_token_offset: int | None = None
    system_text: str = DEFAULT_ROBOT_SYSTEM_TEXT
    mask_token: str = "<|MASK|>"
    null_token: str = "<|NULL|>"
    im_start_token: str = "<|im_start|>"
    im_end_token: str = "<|im_end|>"
    vision_start_token: str = "<|vision_start|>"
    image_pad_token: str = "<|image_pad|>"
    vision_end_token: str = "<|vision_end|>"

    def __post_init__(self) -> None:
        for name in ("horizon", "action_dim", "num_bins", "instruction_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SchemaError(f"ActionSchema.{name}={value!r}: must be an integer >= 1")
        # plausibility bounds: the answer and the prompt scale with them
        for name, limit in (("horizon", 1024), ("action_dim", 1024), ("instruction_budget", 4096)):
            if getattr(self, name) > limit:
                raise SchemaError(f"ActionSchema.{name}={getattr(self, name)}: must be <= {limit}")
        if isinstance(self.proprio_dim, int) and self.proprio_dim > 4096:
            raise SchemaError(f"ActionSchema.proprio_dim={self.proprio_dim}: must be <= 4096")
        if isinstance(self.proprio_dim, bool) or not isinstance(self.proprio_dim, int):
            raise SchemaError(f"ActionSchema.proprio_dim={self.proprio_dim!r}: an integer >= 0")
        if self.proprio_dim < 0:
            raise SchemaError(f"ActionSchema.proprio_dim={self.proprio_dim!r}: an integer >= 0")
        if not 2 <= self.num_bins <= 65536:
            raise SchemaError(f"ActionSchema.num_bins={self.num_bins}: must be in [2, 65536]")
        offset = self.bin_token_offset
        if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int)):
            raise SchemaError(f"ActionSchema.bin_token_offset={offset!r}: an integer or None")
        if offset is not None and offset < 0:
            raise SchemaError(f"ActionSchema.bin_token_offset={offset}: must be >= 0")
        for prefix, dim in (("action", self.action_dim), ("proprio", self.proprio_dim)):
            low_name, high_name = f"{prefix}_low", f"{prefix}_high"
            low = _floats(getattr(self, low_name), low_name) or (-1.0,) * dim
            high = _floats(getattr(self, high_name), high_name) or (1.0,) * dim
            for name, values in ((low_name, low), (high_name, high)):
                if len(values) != dim:
                    raise SchemaError(
                        f"ActionSchema.{name}: {len(values)} values, {prefix}_dim is {dim}"
                    )
            for d, (a, b) in enumerate(zip(low, high, strict=True)):
                if not (math.isfinite(a) and math.isfinite(b) and a < b):
                    raise SchemaError(
                        f"ActionSchema.{low_name}[{d}]={a!r}, {high_name}[{d}]={b!r}: must be "
                        "finite with low < high"
                    )
            object.__setattr__(self, low_name, low)
            object.__setattr__(self, high_name, high)
        check_special_tokens(self, "ActionSchema")

    @property
    def special_token_names(self) -> tuple[str, ...]:
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
    def num_values(self) -> int:
        """Editable answer positions: H·D."""
        return self.horizon * self.action_dim

    def bin_offset(self, tokenizer: Tokenizer) -> int:
        """The id of bin 0."""
        return tokenizer.vocab_size if self.bin_token_offset is None else self.bin_token_offset

    def vocab_size(self, tokenizer: Tokenizer) -> int:
        """The smallest decoder vocabulary that holds the tokenizer's ids and every bin."""
        return max(tokenizer.vocab_size, self.bin_offset(tokenizer) + self.num_bins)


# ---- quantization ----------------------------------------------------------------------------


def quantize(
    values: np.ndarray, low: Sequence[float], high: Sequence[float], num_bins: int
) -> tuple[np.ndarray, int]:
    """values (..., D) → bins (..., D) int64 in [0, K), and how many values were clipped
    (outside [low_d, high_d]). Bin k covers [low + k·w, low + (k+1)·w), w = (high − low)/K;
    high itself falls in the last bin."""
    x = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise SchemaError("action value is not finite: not representable")
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    clipped = int(((x < lo) | (x > hi)).sum())
    bins = np.floor((x - lo) / (hi - lo) * num_bins).astype(np.int64)
    return np.clip(bins, 0, num_bins - 1), clipped


def bin_centres(
    bins: np.ndarray, low: Sequence[float], high: Sequence[float], num_bins: int
) -> np.ndarray:
    """bins (..., D) → the float64 centres low + (k + ½)·(high − low)/K."""
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    return lo + (np.asarray(bins, dtype=np.float64) + 0.5) * (hi - lo) / num_bins


def range_from_data(
    values: np.ndarray, quantile: float = 0.01, margin: float = 1e-6
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-dimension (low, high) of data (N, D) for the bins: the `quantile` and
    1 − `quantile` quantiles (0: min and max), widened by `margin` where they coincide."""
    x = np.asarray(values, dtype=np.float64).reshape(-1, np.shape(values)[-1])
    if len(x) == 0 or not np.all(np.isfinite(x)):
        raise SchemaError("range_from_data: needs finite data")
    if not 0.0 <= quantile < 0.5:
        raise SchemaError(f"range_from_data: quantile={quantile} must be in [0, 0.5)")
    low = np.quantile(x, quantile, axis=0)
    high = np.quantile(x, 1.0 - quantile, axis=0)
    same = high - low < margin
    low, high = np.where(same, low - margin, low), np.where(same, high + margin, high)
    return tuple(float(v) for v in low), tuple(float(v) for v in high)


# ---- config.json -----------------------------------------------------------------------------


def action_schema_to_dict(schema: ActionSchema) -> dict[str, Any]:
    """The schema as JSON-ready data (for a model's config.json)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        value = getattr(schema, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def action_schema_from_dict(data: Mapping[str, Any]) -> ActionSchema:
    """The inverse of `action_schema_to_dict`; unknown keys raise SchemaError naming the key."""
    names = {f.name for f in dataclasses.fields(ActionSchema)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise SchemaError(f"unknown action schema key {unknown[0]!r} (known: {sorted(names)})")
    try:
        return ActionSchema(**data)
    except TypeError as e:
        raise SchemaError(f"bad action schema data: {e}") from e
