"""Models: the Qwen2-compatible decoder, mask builders, vision tower, weights I/O.

model = load_pretrained("models/blockplan-tiny")   # Decoder or PlannerModel
logits = model(input_ids)                           # plain causal forward, (B, S, V)
save_pretrained(model, "out/")                      # config.json + safetensors + manifest
"""

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.decoder import Decoder
from blockplan.model.masks import block_causal_mask, causal_mask, draft_mask, frame_local_mask
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.presets import PRESETS, preset_config
from blockplan.model.pretrained import load_pretrained, save_pretrained
from blockplan.model.vision import VisionConfig, VisionEncoder, VisionTower
from blockplan.model.weights import WeightsError, verify_manifest, write_manifest

__all__ = [
    "PRESETS",
    "Decoder",
    "DecoderConfig",
    "ModelConfigError",
    "PlannerModel",
    "PlannerModelConfig",
    "VisionConfig",
    "VisionEncoder",
    "VisionTower",
    "WeightsError",
    "block_causal_mask",
    "causal_mask",
    "draft_mask",
    "frame_local_mask",
    "load_pretrained",
    "preset_config",
    "save_pretrained",
    "verify_manifest",
    "write_manifest",
]
