"""Qwen2.5-VL sizes for random-init planners and benches, and a memory-frugal random init."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from blockplan.model.config import DecoderConfig
from blockplan.model.qwen2_5_vl.config import QwenVisionConfig, QwenVLConfig, qwen2_5_vl_3b
from blockplan.model.qwen2_5_vl.model import QwenVLModel

INIT_STD = 0.02


def qwen_test_config(vocab_size: int) -> QwenVLConfig:
    """A tiny Qwen2.5-VL for unit tests (same code paths: windows, mRoPE, GQA)."""
    decoder = DecoderConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_theta=1000000.0,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        mrope_section=(2, 3, 3),
    )
    vision = QwenVisionConfig(
        depth=2,
        hidden_size=32,
        intermediate_size=48,
        num_heads=2,
        out_hidden_size=64,
        fullatt_block_indexes=(1,),
        window_size=56,
    )
    return QwenVLConfig(decoder, vision)


# preset -> (config of a vocabulary size, image size (h, w) px the planner resizes frames to)
QWEN_PRESETS: dict[str, tuple[Callable[[int], QwenVLConfig], tuple[int, int]]] = {
    # Fast-dDrive's backbone; 448 x 448 frames give 16 x 16 = 256 visual tokens each
    "qwen2.5-vl-3b": (lambda vocab: qwen2_5_vl_3b(max(vocab, 151936)), (448, 448)),
    "qwen2.5-vl-test": (qwen_test_config, (56, 84)),
}


def with_depth(config: QwenVLConfig, num_layers: int) -> QwenVLConfig:
    """`config` at all its widths, vocabulary and token counts but `num_layers` decoder
    layers and ViT blocks (the last block full attention, the others windowed, as in the
    real ViT): a short smoke run of a big shape, whose time grows about linearly in depth."""
    if num_layers < 1:
        raise ValueError(f"num_layers={num_layers}: must be >= 1")
    decoder = dataclasses.replace(config.decoder, num_hidden_layers=num_layers)
    vision = dataclasses.replace(
        config.vision, depth=num_layers, fullatt_block_indexes=(num_layers - 1,)
    )
    return dataclasses.replace(config, decoder=decoder, vision=vision)


def random_qwen_model(
    config: QwenVLConfig,
    dtype: torch.dtype,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> QwenVLModel:
    """Random weights allocated once, directly in `dtype` on `device` (the 3B shape is 7.5 GB
    in bfloat16; building in float32 first would need twice that, and drawing 3.75 B values
    takes ~100 s on one CPU core, a second on a GPU): N(0, 0.02) for matrices and
    embeddings, ones for norm weights, zeros for biases. The values depend on the device's
    random generator: the same seed gives other weights on a GPU than on the CPU."""
    with torch.device("meta"):
        model = QwenVLModel(config)
    model = model.to(dtype).to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_q" in name):
                p.fill_(1.0)
            elif p.dim() == 1:
                p.zero_()
            else:
                p.normal_(0.0, INIT_STD, generator=generator)
    if config.decoder.tie_word_embeddings:  # to_empty breaks the tie; restore it
        model.decoder.lm_head.weight = model.decoder.model.embed_tokens.weight
    return model.eval()
