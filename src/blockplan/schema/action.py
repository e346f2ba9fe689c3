"""The action schema of the `robot` embodiment: action chunks as bin tokens (docs/SCHEMA.md
"The action schema", docs/ALGORITHMS.md §8).

An answer is a chunk of H timesteps × D action dimensions. Each value is quantized to one of
K bins over its dimension's range [low_d, high_d] (from data statistics, stored in the model
folder's config) and written as one *bin token*: bin k of any dimension is the id
`bin_token_offset + k` (by default right after the tokenizer's vocabulary, so the decoder's
embedding table is the tokenizer's plus K rows). Decoding maps a bin back to its centre,
low_d + (k + ½)·(high_d − low_d)/K, so a chunk comes back as a float (H, D) array of bin
centres.

The scaffold holds the chunk structure, JSON-like, one line:

    {"actions": [[b b b b b b b], [b b b b b b b], ..., [b b b b b b b]]}

(no separator between the D values of a step: one token per value). Blocks are aligned to
timesteps: with block size d = m·D (default D) block g holds steps g·m … g·m + m − 1 and
starts at the structural lead of its first step (`{"actions": [[` or `], [`), so a block's
first position is always known and each of its values is predicted from inside the block
(the token shift never crosses a block boundary); the closing `]]}` rides in the last block.
That is what lets the pipelined strategy start a block before its predecessor is complete.

The prompt (`render_robot_prompt`) is the driving prompt's frame: the system header, the
camera frames view-major (e.g. a fixed view and a wrist camera), then the language
instruction (`instruction_budget` tokens, null-padded) and the proprioceptive state, S values
quantized to bin tokens over their own ranges, so the prompt length is fixed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockplan.schema.codec import ScaffoldParseError
from blockplan.schema.layout import Block, ImageSpan, PromptLayout, Scaffold, Section, Tokenizer
from blockplan.schema.prompt import _camera_line, _encode_static
from blockplan.schema.spec import SchemaError

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
        _check_special_tokens(self, "ActionSchema")

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


# ---- the scaffold ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionVocab:
    """Ids the robot answer and prompt need, looked up once per schema + tokenizer."""

    mask_id: int
    null_id: int
    vision: tuple[int, int, int]  # vision start, image pad, vision end
    bin_offset: int
    num_bins: int

    @property
    def bin_ids(self) -> np.ndarray:
        return np.arange(self.bin_offset, self.bin_offset + self.num_bins)

    def is_bin(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        return (ids >= self.bin_offset) & (ids < self.bin_offset + self.num_bins)


@functools.lru_cache(maxsize=32)
def action_vocab(schema: ActionSchema, tokenizer: Tokenizer) -> ActionVocab:
    try:
        ids = {name: tokenizer.token_id(name) for name in schema.special_token_names}
    except KeyError as e:
        raise SchemaError(f"tokenizer lacks a special token the action schema needs: {e}") from e
    vocab = ActionVocab(
        mask_id=ids[schema.mask_token],
        null_id=ids[schema.null_token],
        vision=(
            ids[schema.vision_start_token],
            ids[schema.image_pad_token],
            ids[schema.vision_end_token],
        ),
        bin_offset=schema.bin_offset(tokenizer),
        num_bins=schema.num_bins,
    )
    if vocab.is_bin(np.array(list(ids.values()))).any():
        raise SchemaError(
            f"bin tokens [{vocab.bin_offset}, {vocab.bin_offset + vocab.num_bins}) overlap the "
            "tokenizer's special tokens"
        )
    return vocab


def _literal(tokenizer: Tokenizer, text: str, vocab: ActionVocab) -> list[int]:
    ids = list(_encode_static(tokenizer, text))
    if not ids or vocab.is_bin(np.array(ids)).any() or vocab.mask_id in ids:
        raise SchemaError(f"action literal {text!r} encodes to {ids}: empty, a bin or the mask")
    return ids


@functools.lru_cache(maxsize=32)
def compile_action_scaffold(
    schema: ActionSchema, tokenizer: Tokenizer, block_size: int
) -> Scaffold:
    """The action chunk as a `Scaffold`: one section `actions`, H·D editable bin slots,
    blocks of `block_size` = m·D values (m whole timesteps), each starting at the structural
    lead of its first timestep (see the module docstring)."""
    D = schema.action_dim
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise SchemaError(f"block_size={block_size!r}: must be an integer >= 1")
    if block_size % D:
        raise SchemaError(
            f"block_size={block_size}: must be a multiple of the action dimension {D} (blocks "
            "hold whole timesteps)"
        )
    vocab = action_vocab(schema, tokenizer)
    steps_per_block = block_size // D
    ids: list[int] = []
    step_starts = []
    for t in range(schema.horizon):
        step_starts.append(len(ids))
        ids += _literal(tokenizer, CHUNK_OPEN if t == 0 else STEP_SEPARATOR, vocab)
        ids += [vocab.mask_id] * D
    ids += _literal(tokenizer, CHUNK_CLOSE, vocab)
    token_ids = np.array(ids, dtype=np.int64)
    is_editable = token_ids == vocab.mask_id
    A = len(ids)
    starts = step_starts[::steps_per_block]
    ends = starts[1:] + [A]
    token_ids.setflags(write=False)
    is_editable.setflags(write=False)
    return Scaffold(
        token_ids=token_ids,
        is_editable=is_editable,
        sections=(Section(ACTION_SECTION, 0, A, schema.num_values),),
        blocks=tuple(Block(a, b, ACTION_SECTION) for a, b in zip(starts, ends, strict=True)),
        block_size=block_size,
        mask_id=vocab.mask_id,
        null_id=vocab.null_id,
    )


def value_positions(scaffold: Scaffold, schema: ActionSchema) -> np.ndarray:
    """(H, D) answer positions of the values; raises SchemaError for another schema's
    scaffold."""
    positions = np.flatnonzero(scaffold.is_editable)
    if len(positions) != schema.num_values or tuple(s.name for s in scaffold.sections) != (
        ACTION_SECTION,
    ):
        raise SchemaError("scaffold does not match this action schema")
    return positions.reshape(schema.horizon, schema.action_dim)


# ---- encode / parse --------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionChunk:
    """A parsed chunk: bins (H, D) int64 and their centres (H, D) float64."""

    bins: np.ndarray
    values: np.ndarray


def encode_actions(
    actions: np.ndarray, scaffold: Scaffold, tokenizer: Tokenizer, schema: ActionSchema
) -> tuple[np.ndarray, int]:
    """A float chunk (H, D) as (A,) int64 answer ids, and how many values were clipped to
    the schema's range."""
    x = np.asarray(actions, dtype=np.float64)
    if x.shape != (schema.horizon, schema.action_dim):
        raise SchemaError(
            f"action chunk shape {x.shape}: expected ({schema.horizon}, {schema.action_dim})"
        )
    bins, clipped = quantize(x, schema.action_low, schema.action_high, schema.num_bins)
    ids = np.array(scaffold.token_ids, dtype=np.int64)
    ids[value_positions(scaffold, schema)] = bins + action_vocab(schema, tokenizer).bin_offset
    return ids, clipped


def parse_actions(
    ids: np.ndarray | list[int], scaffold: Scaffold, tokenizer: Tokenizer, schema: ActionSchema
) -> ActionChunk:
    """Strictly parse (A,) answer ids: every structural token as in the scaffold, every value
    a bin token. Raises `ScaffoldParseError` naming the slot (`step[t][d]`)."""
    vocab = action_vocab(schema, tokenizer)
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != len(scaffold) or not np.issubdtype(ids.dtype, np.integer):
        raise ScaffoldParseError(
            ACTION_SECTION,
            "ids",
            f"expected ({len(scaffold)},) integer ids, got {ids.shape} {ids.dtype}",
        )
    positions = value_positions(scaffold, schema)
    structural = ~np.asarray(scaffold.is_editable)
    bad = np.flatnonzero((ids != scaffold.token_ids) & structural)
    if len(bad):
        i = int(bad[0])
        raise ScaffoldParseError(
            ACTION_SECTION,
            f"structure@{i}",
            f"structural token {int(ids[i])} differs from the scaffold's "
            f"{int(scaffold.token_ids[i])}",
        )
    values = ids[positions]  # (H, D)
    wrong = np.argwhere(~vocab.is_bin(values))
    if len(wrong):
        t, d = (int(v) for v in wrong[0])
        got = int(values[t, d])
        what = "the mask token" if got == vocab.mask_id else f"id {got}"
        raise ScaffoldParseError(ACTION_SECTION, f"step[{t}][{d}]", f"expected a bin, got {what}")
    bins = (values - vocab.bin_offset).astype(np.int64)
    centres = bin_centres(bins, schema.action_low, schema.action_high, schema.num_bins)
    return ActionChunk(bins, centres)


def render_action_text(bins: np.ndarray) -> str:
    """A chunk's bins (H, D) as JSON text, `{"actions": [[12, 200, ...], ...]}` (for logs and
    exports; the model's answer has no separators between the values of a step)."""
    rows = ", ".join("[" + ", ".join(str(int(b)) for b in row) + "]" for row in np.asarray(bins))
    return '{"actions": [' + rows + "]}"


# ---- the prompt ------------------------------------------------------------------------------


def _instruction_ids(
    text: str, tokenizer: Tokenizer, schema: ActionSchema, vocab: ActionVocab
) -> tuple[list[int], bool]:
    """The instruction's ids cut to the budget and null-padded, and whether it was cut."""
    ids = list(tokenizer.encode(text))
    special = {tokenizer.token_id(n) for n in schema.special_token_names}
    if any(i in special for i in ids):
        raise SchemaError(f"instruction {text[:40]!r} holds special-token text")
    budget = schema.instruction_budget
    is_cut = len(ids) > budget
    ids = ids[:budget]
    return ids + [vocab.null_id] * (budget - len(ids)), is_cut


def proprio_bins(proprio: np.ndarray | None, schema: ActionSchema) -> np.ndarray:
    """(S,) state bins (zeros of the state for None: a template of the same length)."""
    S = schema.proprio_dim
    state = np.zeros(S) if proprio is None else np.asarray(proprio, dtype=np.float64)
    if state.shape != (S,):
        raise SchemaError(f"proprio shape {state.shape}: expected ({S},)")
    bins, _ = quantize(state, schema.proprio_low, schema.proprio_high, schema.num_bins)
    return bins


def render_robot_prompt(
    observation: Any,
    tokenizer: Tokenizer,
    schema: ActionSchema,
    camera_names: Sequence[str],
    num_frames: int,
    tokens_per_image: int,
    proprio: np.ndarray | None = None,
    instruction: str | None = None,
) -> PromptLayout:
    """The robot prompt as token ids with image placeholders:

        <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{camera line}   ← header
        [<|vision_start|> <|image_pad|> × tokens_per_image <|vision_end|>] × K × T, view-major
        \\nInstruction: {instruction_budget tokens}\\nState: {S bin tokens}\\nAnswer with the
        action chunk.<|im_end|>\\n<|im_start|>assistant\\n

    `observation` (a `RobotObservation`) gives the state and instruction unless passed;
    None renders a template of the same length (zero state, empty instruction)."""
    if tokens_per_image < 1:
        raise SchemaError(f"tokens_per_image={tokens_per_image}: must be >= 1")
    vocab = action_vocab(schema, tokenizer)
    if proprio is None and observation is not None:
        proprio = observation.proprio
    if instruction is None:
        instruction = observation.instruction if observation is not None else ""
    s, e = schema.im_start_token, schema.im_end_token
    header = f"{s}system\n{schema.system_text}{e}\n{s}user\n"
    ids = list(_encode_static(tokenizer, header + _camera_line(camera_names, num_frames)))
    header_end = len(ids)
    spans = []
    vision_start, image_pad, vision_end = vocab.vision
    for camera_index in range(len(camera_names)):
        for frame_index in range(num_frames):
            ids.append(vision_start)
            start = len(ids)
            spans.append(ImageSpan(start, start + tokens_per_image, camera_index, frame_index))
            ids += [image_pad] * tokens_per_image
            ids.append(vision_end)
    ids += _encode_static(tokenizer, "\nInstruction: ")
    ids += _instruction_ids(instruction, tokenizer, schema, vocab)[0]
    if schema.proprio_dim:
        ids += _encode_static(tokenizer, "\nState: ")
        ids += (proprio_bins(proprio, schema) + vocab.bin_offset).tolist()
    ids += _encode_static(tokenizer, f"\nAnswer with the action chunk.{e}\n{s}assistant\n")
    token_ids = np.array(ids, dtype=np.int64)
    token_ids.setflags(write=False)
    return PromptLayout(token_ids=token_ids, header_end=header_end, image_spans=tuple(spans))


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


def _check_special_tokens(schema: object, what: str) -> None:
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
