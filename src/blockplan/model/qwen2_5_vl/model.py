"""`QwenVLModel`: HF `Qwen2_5_VLForConditionalGeneration` as our Decoder + vision tower.

The network only (no planner settings): `forward` is the decoder's pure forward (token ids
or embeddings, positions (B, S) or multimodal (3, B, S), an explicit mask, a KV store);
`encode_images` runs the ViT. Checkpoint names: `model.*` and `lm_head.*` for the decoder
(`model.language_model.*` in transformers >= 4.52 saves, renamed on load), `visual.*` (or
`model.visual.*`) for the ViT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from blockplan.model.config import DecoderConfig
from blockplan.model.decoder import Decoder
from blockplan.model.qwen2_5_vl.config import QwenVLConfig
from blockplan.model.qwen2_5_vl.vision import QwenVisionTransformer
from blockplan.model.weights import WeightsError, save_folder

VISUAL_PREFIX = "visual."
# transformers >= 4.52 names → the published names
RENAMES = (("model.language_model.", "model."), ("model.visual.", "visual."))


def canonical_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Qwen2.5-VL state dict under the published names (`model.*`, `lm_head.*`, `visual.*`)."""
    out = {}
    for name, tensor in state.items():
        for old, new in RENAMES:
            if name.startswith(old):
                name = new + name[len(old) :]
                break
        if name in out:
            raise WeightsError(f"tensor {name!r} appears under two names")
        out[name] = tensor
    return out


class QwenVLModel(nn.Module):
    def __init__(self, config: QwenVLConfig) -> None:
        super().__init__()
        self.config = config
        self.decoder = Decoder(config.decoder)
        self.visual = QwenVisionTransformer(config.vision)

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.config.decoder

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        return self.decoder(input_ids, **kwargs)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.decoder.embed(input_ids)

    def encode_images(self, patches: torch.Tensor, grid_hw: tuple[int, int]) -> torch.Tensor:
        """patches (N, g_h*g_w, 1176) → visual tokens (N, g_h*g_w/4, W)."""
        return self.visual(patches, grid_hw)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- folders ---------------------------------------------------------------------------

    def folder_state(self) -> dict[str, torch.Tensor]:
        return {k.removeprefix("decoder."): v for k, v in self.state_dict().items()}

    def save_pretrained(self, path: str | Path, tokenizer_json: str | None = None) -> Path:
        """A folder in the published Qwen2.5-VL layout (transformers loads it too)."""
        extra = {"tokenizer.json": tokenizer_json} if tokenizer_json is not None else None
        return save_folder(self.folder_state(), self.config.to_hf_dict(), path, extra)

    @classmethod
    def from_config_and_state(
        cls, raw: dict[str, Any], state: dict[str, torch.Tensor], where: str
    ) -> QwenVLModel:
        """The model holding `state`'s tensors themselves (no random init, no copy: a 3B
        checkpoint costs its own size once), names and shapes checked strictly."""
        config = QwenVLConfig.from_hf_dict(raw)
        state = {
            "decoder." + k if not k.startswith(VISUAL_PREFIX) else k: v
            for k, v in canonical_names(state).items()
        }
        tied = config.decoder.tie_word_embeddings
        if tied:
            state.pop("decoder.lm_head.weight", None)
        with torch.device("meta"):
            model = cls(config)
        expected = model.state_dict()
        if tied:
            expected.pop("decoder.lm_head.weight")
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing or unexpected:
            raise WeightsError(
                f"{where}: missing tensors {missing[:3]}, unexpected tensors {unexpected[:3]}"
            )
        for name, tensor in state.items():
            if tensor.shape != expected[name].shape:
                raise WeightsError(
                    f"{where}: {name.removeprefix('decoder.')} has shape "
                    f"{tuple(tensor.shape)}, the config wants {tuple(expected[name].shape)}"
                )
        model.load_state_dict(state, strict=False, assign=True)
        if tied:
            model.decoder.lm_head.weight = model.decoder.model.embed_tokens.weight
        return model
