"""The action scaffold: bin-token vocabulary, the chunk's fixed structure and blocks, and
encoding a chunk to tokens and parsing it back."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from blockplan.schema.action.schema import (
    ACTION_SECTION,
    CHUNK_CLOSE,
    CHUNK_OPEN,
    STEP_SEPARATOR,
    ActionSchema,
    bin_centres,
    quantize,
)
from blockplan.schema.codec import ScaffoldParseError
from blockplan.schema.layout import Block, Scaffold, Section, Tokenizer
from blockplan.schema.prompt import _encode_static
from blockplan.schema.spec import SchemaError

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
