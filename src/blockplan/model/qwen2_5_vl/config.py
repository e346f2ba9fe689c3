"""Qwen2.5-VL architecture settings, read from a Hugging Face `config.json`.

Two layouts exist in the wild: published checkpoints (transformers < 5) keep the text fields
at the top level next to `vision_config`; transformers >= 5 writes them under `text_config`.
Both are read; `to_hf_dict` writes the published layout (which transformers reads too).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from blockplan.model.config import DecoderConfig, ModelConfigError

MODEL_TYPE = "qwen2_5_vl"


@dataclass(frozen=True)
class QwenVisionConfig:
    """The ViT (field names as in HF `Qwen2_5_VLVisionConfig`)."""

    depth: int = 32
    hidden_size: int = 1280
    intermediate_size: int = 3420
    num_heads: int = 16
    out_hidden_size: int = 2048
    in_channels: int = 3
    patch_size: int = 14
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    window_size: int = 112
    fullatt_block_indexes: tuple[int, ...] = (7, 15, 23, 31)
    tokens_per_second: int = 2
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if isinstance(self.fullatt_block_indexes, list):
            object.__setattr__(self, "fullatt_block_indexes", tuple(self.fullatt_block_indexes))
        for name in ("depth", "hidden_size", "intermediate_size", "num_heads", "out_hidden_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ModelConfigError(f"vision_config.{name}={value!r}: must be an integer >= 1")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise ModelConfigError(
                f"vision_config.hidden_size={self.hidden_size}: hidden_size / num_heads must "
                "be a multiple of 4 (2-D rotary embedding)"
            )
        if self.window_size % (self.patch_size * self.spatial_merge_size):
            raise ModelConfigError(
                f"vision_config.window_size={self.window_size}: must be a multiple of "
                f"patch_size * spatial_merge_size = {self.patch_size * self.spatial_merge_size}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def factor(self) -> int:
        """Image sides must be multiples of this (28): one merged token per factor²."""
        return self.patch_size * self.spatial_merge_size

    @property
    def patch_dim(self) -> int:
        """Values per patch: C * T * P * P (1176)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QwenVisionConfig:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        rope = d.get("rope_parameters") or {}
        if "rope_theta" in rope:
            kwargs["rope_theta"] = rope["rope_theta"]
        if "embed_dim" in d and "hidden_size" not in d:  # Qwen2-VL spelling
            kwargs["hidden_size"] = d["embed_dim"]
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fullatt_block_indexes"] = list(self.fullatt_block_indexes)
        d["hidden_act"] = "silu"
        return d


@dataclass(frozen=True)
class QwenVLConfig:
    """Decoder (with mRoPE) + ViT + the ids of the image markers."""

    decoder: DecoderConfig
    vision: QwenVisionConfig
    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653

    def __post_init__(self) -> None:
        if self.decoder.mrope_section is None:
            raise ModelConfigError("rope_scaling.mrope_section: a Qwen2.5-VL decoder needs it")
        if self.vision.out_hidden_size != self.decoder.hidden_size:
            raise ModelConfigError(
                f"vision_config.out_hidden_size={self.vision.out_hidden_size}: must equal the "
                f"decoder hidden_size={self.decoder.hidden_size}"
            )

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> QwenVLConfig:
        if d.get("model_type") != MODEL_TYPE:
            raise ModelConfigError(f"model_type={d.get('model_type')!r}: expected {MODEL_TYPE!r}")
        text = {k: v for k, v in d.items() if k not in ("text_config", "vision_config")}
        text.update(d.get("text_config") or {})
        if "tie_word_embeddings" in d:  # the top-level flag decides, as in transformers
            text["tie_word_embeddings"] = bool(
                d["tie_word_embeddings"] or text.get("tie_word_embeddings")
            )
        if "vision_config" not in d:
            raise ModelConfigError("config.json lacks 'vision_config'")
        ids = {
            k: int(d[k])
            for k in (
                "image_token_id",
                "video_token_id",
                "vision_start_token_id",
                "vision_end_token_id",
            )
            if k in d
        }
        return cls(
            DecoderConfig.from_dict(text), QwenVisionConfig.from_dict(d["vision_config"]), **ids
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """The published `config.json` layout (text fields at the top level)."""
        d = self.decoder.to_dict()
        d.update(
            model_type=MODEL_TYPE,
            architectures=["Qwen2_5_VLForConditionalGeneration"],
            vision_config=self.vision.to_dict(),
            image_token_id=self.image_token_id,
            video_token_id=self.video_token_id,
            vision_start_token_id=self.vision_start_token_id,
            vision_end_token_id=self.vision_end_token_id,
        )
        return d


def qwen2_5_vl_3b(vocab_size: int = 151936) -> QwenVLConfig:
    """Qwen2.5-VL-3B-Instruct's shape (its published config.json)."""
    decoder = DecoderConfig(
        vocab_size=vocab_size,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        max_position_embeddings=128000,
        tie_word_embeddings=True,
        mrope_section=(16, 24, 24),
    )
    vision = QwenVisionConfig(out_hidden_size=2048)
    return QwenVLConfig(decoder, vision)
