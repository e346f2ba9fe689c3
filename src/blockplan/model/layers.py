"""The maths of one Qwen2 decoder layer: RMSNorm, rotary embedding, GQA attention, SwiGLU.

Parameter names and shapes match Hugging Face `Qwen2DecoderLayer`, so its state dict loads
unchanged. Shapes: B batch, S new tokens, L key slots (cached + new), H heads, D head_dim.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import DecoderConfig
from blockplan.model.tiles import AttentionTiles


class KVStore(Protocol):
    """Where a forward writes the new tokens' K/V (the engine's `KVCache` implements it).

    New tokens go to the slots after the committed ones; they stay pending until the engine
    commits them, so a later forward may overwrite them (draft windows, rejected tokens).
    """

    def write_positions(self, positions: torch.Tensor) -> None:
        """Record the new tokens' positions (B, S)."""
        ...

    def write(
        self, layer: int, k_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' pre-RoPE keys, rotated keys and values (B, Hkv, S, D) after
        the committed slots; return the rotated keys and values of all slots the new tokens
        may see, (B, Hkv, L, D) each."""
        ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 at least, as HF does, then cast back.
        dtype = x.dtype
        h = x.to(torch.promote_types(dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rope_cos_sin(
    positions: torch.Tensor,
    head_dim: int,
    theta: float,
    dtype: torch.dtype,
    mrope_section: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (B, 1, S, D) for integer positions (B, S); HF's half-split layout.

    Multimodal RoPE (Qwen2.5-VL): positions (3, B, S) hold the temporal, height and width
    position of each token; frequency pair j is rotated by axis a where j falls in the a-th
    run of `mrope_section` (sizes summing to D/2). Text tokens carry equal positions on the
    three axes, which is plain RoPE.
    """
    compute = torch.promote_types(dtype, torch.float32)
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device)
    inv_freq = 1.0 / (theta ** (exponent.to(compute) / head_dim))  # (D/2,)
    angles = positions.to(compute)[..., None] * inv_freq  # (B, S, D/2) or (3, B, S, D/2)
    if positions.dim() == 3:
        if mrope_section is None:
            raise ValueError("rope_cos_sin: positions (3, B, S) need an mrope_section")
        runs = angles.split(list(mrope_section), dim=-1)  # run a of axis a
        angles = torch.cat([run[a] for a, run in enumerate(runs)], dim=-1)  # (B, S, D/2)
    angles = torch.cat([angles, angles], dim=-1)[:, None]  # (B, 1, S, D)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, H, S, D) by its positions: R(p)x = x·cos + rotate_half(x)·sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Grouped-query attention with QKV bias (Qwen2) under an explicit additive mask.

    The cache keeps each key both rotated (what attention uses) and before RoPE, so a
    cached token can be re-based to a new position exactly (docs/ALGORITHMS.md §6).
    """

    def __init__(self, config: DecoderConfig, layer_index: int) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.dim_per_head
        width = config.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, width, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # (B, S, W)
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin (B, 1, S, D) of the new tokens
        bias: torch.Tensor | AttentionTiles | None,  # (B, 1, S, L) additive: 0 / -inf
        cache: KVStore | None,
    ) -> torch.Tensor:
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.num_heads, self.head_dim).transpose(1, 2)
        k_raw = self.k_proj(x).view(B, S, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, *rope)  # (B, H, S, D)
        k = apply_rope(k_raw, *rope)  # (B, Hkv, S, D)
        if cache is not None:
            k, v = cache.write(self.layer_index, k_raw, k, v)  # (B, Hkv, L, D)
        if isinstance(bias, AttentionTiles):
            out = bias.attend(q, k, v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, -1))  # (B, S, W)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        width, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(width, inner, bias=False)
        self.up_proj = nn.Linear(width, inner, bias=False)
        self.down_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: DecoderConfig, layer_index: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer_index)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        bias: torch.Tensor | AttentionTiles | None,
        cache: KVStore | None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, bias, cache)
        return x + self.mlp(self.post_attention_layernorm(x))
