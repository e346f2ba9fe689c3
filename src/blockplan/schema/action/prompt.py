"""The robot prompt: system header, camera frames, instruction and proprioception, all
fixed-length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blockplan.schema.action.scaffold import ActionVocab, action_vocab
from blockplan.schema.action.schema import (
    ActionSchema,
    quantize,
)
from blockplan.schema.layout import ImageSpan, PromptLayout, Tokenizer
from blockplan.schema.prompt import _camera_line, _encode_static
from blockplan.schema.spec import SchemaError

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


def check_instructions(
    texts: Sequence[str], tokenizer: Tokenizer, schema: ActionSchema
) -> dict[str, int]:
    """The instructions a model learns, as its prompt will hold them: a SchemaError where two
    different instructions become the same ids once cut to `schema.instruction_budget` (the
    model could not tell those tasks apart; the error names the budget that keeps them
    apart). Returns {instruction: its token count} of those that are cut.

    The tokenizers are byte-level BPE without an unknown token: a word outside the merges
    costs more tokens, never becomes an UNK, so the budget is what can lose words."""
    vocab = action_vocab(schema, tokenizer)
    seen: dict[tuple[int, ...], str] = {}
    cut: dict[str, int] = {}
    for text in sorted(set(texts)):
        ids, is_cut = _instruction_ids(text, tokenizer, schema, vocab)
        if is_cut:
            cut[text] = len(tokenizer.encode(text))
        other = seen.setdefault(tuple(ids), text)
        if other != text:
            need = max(len(tokenizer.encode(t)) for t in (text, other))
            raise SchemaError(
                f"instructions {other!r} and {text!r} are the same in their first "
                f"{schema.instruction_budget} tokens (the instruction budget): set an "
                f"instruction budget of at least {need}"
            )
    return cut


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
