"""The decoder's architecture settings, read from / written to a HF-style `config.json`."""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from blockplan.errors import UserError


class ModelConfigError(UserError, ValueError):
    """A model folder's config.json is missing a field or holds a bad value; names it."""


@dataclass(frozen=True)
class DecoderConfig:
    """A Qwen2-architecture decoder (field names as in HF `Qwen2Config`)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    # Multimodal RoPE (Qwen2-VL / Qwen2.5-VL): the rotary frequency pairs are cut into three
    # runs of these sizes, rotated by the temporal, height and width position respectively.
    # None: plain 1-D RoPE. Positions equal on all three axes give plain RoPE either way.
    mrope_section: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.mrope_section, list):  # JSON gives lists
            object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ModelConfigError(f"{name}={value!r}: must be an integer >= 1")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelConfigError(
                f"num_key_value_heads={self.num_key_value_heads}: must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ModelConfigError(
                f"hidden_size={self.hidden_size}: must be a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.dim_per_head % 2:
            raise ModelConfigError(f"head_dim={self.dim_per_head}: RoPE needs an even head_dim")
        if self.mrope_section is not None and (
            len(self.mrope_section) != 3
            or min(self.mrope_section) < 0
            or sum(self.mrope_section) != self.dim_per_head // 2
        ):
            raise ModelConfigError(
                f"mrope_section={list(self.mrope_section)}: must be 3 sizes summing to "
                f"head_dim / 2 = {self.dim_per_head // 2}"
            )

    @property
    def dim_per_head(self) -> int:
        return (
            self.head_dim
            if self.head_dim is not None
            else self.hidden_size // self.num_attention_heads
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecoderConfig:
        """From a HF `config.json` dict (Qwen2 / Qwen2.5); unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if "rope_theta" not in kwargs and "rope_theta" in rope:
            kwargs["rope_theta"] = rope["rope_theta"]
        if "mrope_section" in rope:
            kwargs["mrope_section"] = tuple(rope["mrope_section"])
        if d.get("use_sliding_window"):
            raise ModelConfigError(
                "use_sliding_window=true: sliding-window attention is not supported"
            )
        # Qwen2.5-VL writes {"type": "mrope", "mrope_section": ...}: default RoPE per axis.
        if rope.get("rope_type", "default") not in ("default", "mrope", None):
            raise ModelConfigError(f"rope_type={rope['rope_type']!r}: only 'default' is supported")
        missing = sorted(
            f.name for f in fields(cls) if f.name not in kwargs and f.default is MISSING
        )
        if missing:
            raise ModelConfigError(f"config.json lacks {missing[0]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A HF-compatible `config.json` dict (`model_type: qwen2`)."""
        d = asdict(self)
        if d["head_dim"] is None:
            del d["head_dim"]
        mrope = d.pop("mrope_section")
        if mrope is not None:
            d["rope_scaling"] = {"type": "mrope", "mrope_section": list(mrope)}
        d.update(
            model_type="qwen2",
            architectures=["Qwen2ForCausalLM"],
            hidden_act="silu",
            attention_dropout=0.0,
            use_sliding_window=False,
        )
        return d
