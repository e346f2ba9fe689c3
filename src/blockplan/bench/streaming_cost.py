"""Why the streamed prefill costs what it does: the prompt's tokens by kind and the ideal
streamed / full ratio from token counts and from a FLOP count of the forwards.

A streamed tick computes the K new frames (each frame's tokens attend to their own frame,
plus the header when the layout attends to it) and every text token after the header — the
image delimiters and the text after the images attend to the frames before them, so they
change every tick whatever is reused. The full prefill computes all P tokens under the
prompt mask. FLOPs per layer: linear layers 2·(W·(H + 2·Hkv)·D + H·D·W + 3·W·I) per token,
attention 4·H·D per (query, key) pair the mask allows (`ideal_flop_ratio`) or per pair a
dense masked kernel computes (`ideal_dense_flop_ratio`: what SDPA with a boolean mask does on
CPU). Encoding, RoPE re-rotation and cache copies are not counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockplan.planner.planner import Planner
from blockplan.schema import render_prompt
from blockplan.schema.prompt import HISTORY_COLUMNS


def _flops(planner: Planner, tokens: int, pairs: int) -> float:
    d = planner.model.config.decoder
    H, Hkv, D, W, inner = (
        d.num_attention_heads,
        d.num_key_value_heads,
        d.dim_per_head,
        d.hidden_size,
        d.intermediate_size,
    )
    linear = 2 * (W * (H + 2 * Hkv) * D + H * D * W + 3 * W * inner)
    return d.num_hidden_layers * (tokens * linear + pairs * 4 * H * D)


def observation_dependent(planner: Planner, draws: int = 4, seed: int = 0) -> np.ndarray:
    """(P,) bool: the prompt positions whose token depends on the observation (ego history
    digits, route command), found as the positions where prompts of random histories and
    every route command differ from the template's."""
    mc, schema = planner.model.config, planner.schema
    template = np.asarray(planner.render(None).token_ids)
    rng = np.random.default_rng(seed)
    varying = np.zeros(len(template), dtype=bool)
    for i in range(max(draws, len(schema.route_commands))):
        history = rng.uniform(-999, 999, (schema.num_history, len(HISTORY_COLUMNS)))
        layout = render_prompt(
            None,
            planner.tokenizer,
            schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
            ego_history=history,
            route_command=schema.route_commands[i % len(schema.route_commands)],
            ego_tokens=mc.ego_tokens,
        )
        varying |= np.asarray(layout.token_ids) != template
        if layout.ego_span is not None:  # the ego slots' embeddings change with the history
            varying[layout.ego_span[0] : layout.ego_span[1]] = True
    return varying


def prefill_breakdown(planner: Planner) -> dict[str, Any]:
    """The prompt's tokens by kind and the ideal streamed / full prefill ratios of a tick that
    brings one new frame per camera (see the module)."""
    template = planner.render(None)
    mc = planner.model.config
    K, T, G = len(mc.camera_names), mc.num_frames, mc.tokens_per_image
    P, h = len(template), template.header_end
    visual = K * T * G
    delimiters = 2 * K * T  # vision start / end around every image
    tail = P - max(s.end for s in template.image_spans) - 1  # after the last image's end
    varying = observation_dependent(planner)
    text = P - h - visual  # recomputed every tick
    streamed_tokens = K * G + text
    mask = planner.prompt_mask  # (P, P) bool
    full_pairs = int(mask.sum())
    frame_pairs = G * (G + (h if mc.visual_attention == "frame_and_header" else 0))
    is_text = np.ones(P, dtype=bool)
    is_text[:h] = False
    for s in template.image_spans:
        is_text[s.start : s.end] = False
    text_pairs = int(mask.numpy()[is_text].sum())  # text rows see everything before them
    streamed_flops = _flops(planner, K * G, K * frame_pairs) + _flops(planner, text, text_pairs)
    # A dense attention kernel under a mask computes every (query, key) pair it is given: the
    # full prefill P·P, the streamed forwards their queries times the keys they are handed.
    dense_streamed = _flops(planner, K * G, K * G * (h + K * G)) + _flops(planner, text, text * P)
    # If the observation-independent text after the images came before them (a different
    # prompt format: needs retraining), it would be cached like the header.
    movable = int((~varying[h:] & is_text[h:]).sum()) - delimiters
    return {
        "prompt_tokens": P,
        "tokens_by_kind": {
            "header": h,
            "visual": visual,
            "image_delimiters": delimiters,
            "text_after_images": tail,
            "of_which_observation_dependent": int(varying.sum()),
        },
        "streamed_tokens_per_tick": {"new_visual": K * G, "text": text},
        "ideal_token_ratio": streamed_tokens / P,
        "ideal_flop_ratio": streamed_flops / _flops(planner, P, full_pairs),
        "ideal_dense_flop_ratio": dense_streamed / _flops(planner, P, P * P),
        "ideal_token_ratio_static_text_before_images": (streamed_tokens - movable) / P,
    }
