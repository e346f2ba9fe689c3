"""Tiny random Qwen2.5-VL checkpoints written by transformers (no download)."""

from __future__ import annotations

import torch

IMAGE_ID, VIDEO_ID, VSTART_ID, VEND_ID = 290, 291, 288, 289
VOCAB = 300


def hf_config(transformers, vocab_size: int = VOCAB, tie: bool = False):
    return transformers.Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=vocab_size,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            max_position_embeddings=2048,
            rms_norm_eps=1e-6,
            tie_word_embeddings=tie,
        ),
        vision_config=dict(
            depth=3,
            hidden_size=32,
            intermediate_size=48,
            num_heads=2,
            out_hidden_size=64,
            fullatt_block_indexes=[1],
            window_size=56,
        ),
        image_token_id=IMAGE_ID,
        video_token_id=VIDEO_ID,
        vision_start_token_id=VSTART_ID,
        vision_end_token_id=VEND_ID,
        tie_word_embeddings=tie,
    )


def hf_model(transformers, folder, seed: int = 0, tie: bool = False, **kwargs):
    """A random Qwen2_5_VLForConditionalGeneration saved to `folder` (with non-trivial
    norms and biases)."""
    torch.manual_seed(seed)
    model = transformers.Qwen2_5_VLForConditionalGeneration(hf_config(transformers, tie=tie))
    model = model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_q" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder, **kwargs)
    return model
