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

from blockplan.schema.action.prompt import (
    proprio_bins,
    render_robot_prompt,
)
from blockplan.schema.action.scaffold import (
    ActionChunk,
    ActionVocab,
    action_vocab,
    compile_action_scaffold,
    encode_actions,
    parse_actions,
    render_action_text,
    value_positions,
)
from blockplan.schema.action.schema import (
    ACTION_SECTION,
    CHUNK_CLOSE,
    CHUNK_OPEN,
    DEFAULT_ROBOT_SYSTEM_TEXT,
    ROBOT_CAMERAS,
    STEP_SEPARATOR,
    ActionSchema,
    action_schema_from_dict,
    action_schema_to_dict,
    bin_centres,
    quantize,
    range_from_data,
)

__all__ = [
    "ROBOT_CAMERAS",
    "CHUNK_CLOSE",
    "CHUNK_OPEN",
    "STEP_SEPARATOR",
    "ACTION_SECTION",
    "ActionChunk",
    "ActionSchema",
    "ActionVocab",
    "DEFAULT_ROBOT_SYSTEM_TEXT",
    "action_schema_from_dict",
    "action_schema_to_dict",
    "action_vocab",
    "bin_centres",
    "compile_action_scaffold",
    "encode_actions",
    "parse_actions",
    "proprio_bins",
    "quantize",
    "range_from_data",
    "render_action_text",
    "render_robot_prompt",
    "value_positions",
]
