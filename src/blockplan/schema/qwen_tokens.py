"""A Qwen2.5-VL-like tokenizer for tests and random-init benches (no download).

Published Qwen2.5-VL checkpoints ship a 151k byte-level BPE whose special tokens are *added*
after the merges (`<|endoftext|>` = 151643, ..., `<|image_pad|>` = 151655), and Fast-dVLM /
Fast-dDrive add `|<MASK>|` and a null token. `build_qwen_like_tokenizer` makes the same kind
of `tokenizer.json` at a small size: our byte-level BPE with Qwen2's split pattern (digits
single, punctuation runs with one leading space), trained on Fast-dDrive-format answers and
prompts, then Qwen2.5-VL's special tokens and the block-diffusion tokens added at the end.
The real file loads the same way (`load_tokenizer`); only the ids and merges differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blockplan.schema.answer import render_answer_text
from blockplan.schema.corpus import random_answer
from blockplan.schema.prompt import IMAGE_PLACEHOLDER, render_prompt_text
from blockplan.schema.spec import DrivingSchema, fastddrive_schema
from blockplan.schema.tokenizer import JsonTokenizer, train_tokenizer

# Qwen2.5-VL's added tokens in id order (151643..151664), then the block-diffusion ones.
QWEN2_5_VL_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
BLOCK_DIFFUSION_TOKENS: tuple[str, ...] = ("|<MASK>|", "<|NULL|>")


def qwen_like_corpus(schema: DrivingSchema, num_answers: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = []
    cameras = ("front_left", "front", "front_right")
    for i in range(num_answers):
        texts.append(render_answer_text(random_answer(rng, schema), schema))
        if i % 8 == 0:
            history = rng.normal(0.0, 5.0, size=(schema.num_history, 6))
            command = schema.route_commands[rng.integers(len(schema.route_commands))]
            prompt = render_prompt_text(None, schema, cameras, 1, history, command)
            texts += [prompt.system, prompt.user.replace(IMAGE_PLACEHOLDER, "")]
            texts.append("system\nuser\nassistant\n")
    return texts


def build_qwen_like_tokenizer(
    path: str | Path | None = None,
    vocab_size: int = 640,
    num_answers: int = 400,
    schema: DrivingSchema | None = None,
) -> JsonTokenizer:
    """Train the small Qwen-like BPE (deterministic) and add the special tokens after it."""
    schema = schema or fastddrive_schema()
    corpus = qwen_like_corpus(schema, num_answers)
    tokenizer = train_tokenizer(corpus, vocab_size, special_tokens=())
    tokenizer.backend.add_special_tokens([*QWEN2_5_VL_SPECIAL_TOKENS, *BLOCK_DIFFUSION_TOKENS])
    if path is not None:
        tokenizer.save(path)
    return tokenizer
