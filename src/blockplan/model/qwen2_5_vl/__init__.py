"""Qwen2.5-VL (the backbone of Fast-dVLM and Fast-dDrive): vision tower, multimodal RoPE,
preprocessing and the loader behind `load_pretrained` (`model_type: qwen2_5_vl`).

net = load_pretrained("Fast-dDrive/")                      # QwenVLModel
patches = preprocess_image(frame, net.config.vision)       # uint8 (H, W, 3) → (S, 1176)
tokens = net.encode_images(patches[None], (h // 14, w // 14))
rope = mrope_positions(P, image_spans, merged_grids)       # (3, P) + where text continues
logits = net(inputs_embeds=embeds, positions=rope.positions[:, None])
"""

from blockplan.model.qwen2_5_vl.config import QwenVisionConfig, QwenVLConfig, qwen2_5_vl_3b
from blockplan.model.qwen2_5_vl.model import QwenVLModel
from blockplan.model.qwen2_5_vl.preprocess import ImageSizeError, preprocess_image, smart_resize
from blockplan.model.qwen2_5_vl.rope import MropePositions, mrope_positions

__all__ = [
    "ImageSizeError",
    "MropePositions",
    "QwenVLConfig",
    "QwenVLModel",
    "QwenVisionConfig",
    "mrope_positions",
    "preprocess_image",
    "qwen2_5_vl_3b",
    "smart_resize",
]
