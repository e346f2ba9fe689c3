"""The Qwen2.5-VL vision transformer: patches → merged visual tokens in the decoder width.

Parameter names and shapes match HF `Qwen2_5_VisionTransformerPretrainedModel` (prefix
`visual.` in a checkpoint). Per image of g_h × g_w patches (14 px, two frames stacked):

* `patch_embed`: a Conv3d whose kernel equals its stride, i.e. one linear map per patch;
* a 2-D rotary embedding: the first half of each head's frequency pairs rotates by the
  patch row, the second half by its column (head_dim / 4 frequencies each);
* `depth` pre-norm blocks (RMSNorm, attention with QKV bias, SwiGLU MLP with bias). Blocks in
  `fullatt_block_indexes` attend over the whole image; the others only inside windows of
  `window_size` px (8 × 8 patches), aligned to the top-left corner;
* `merger`: RMSNorm, then each 2 × 2 patch group (consecutive in the input order) is
  concatenated and mapped by a 2-layer GELU MLP to one token of `out_hidden_size`.

Patches arrive grouped by 2 × 2 merge unit, units in row-major order (the processor's
order), so the merged tokens come out row-major. HF permutes the tokens into window order
and runs each window separately; attention is permutation-equivariant, so here the tokens
stay in place and a (S, S) same-window mask does the same (images in a batch share a grid).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.layers import RMSNorm, apply_rope
from blockplan.model.qwen2_5_vl.config import QwenVisionConfig

MERGER_EPS = 1e-6


class VisionAttention(nn.Module):
    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=True)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(
        self,
        x: torch.Tensor,  # (N, S, C)
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin (S, D) float32
        mask: torch.Tensor | None,  # (S, S) bool, True = may attend; None = whole image
    ) -> torch.Tensor:
        N, S, C = x.shape
        qkv = self.qkv(x).view(N, S, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)  # (3,N,H,S,D)
        q, k, v = qkv.unbind(0)
        cos, sin = rope
        q = apply_rope(q.float(), cos, sin).to(v.dtype)  # rotated in float32, as HF does
        k = apply_rope(k.float(), cos, sin).to(v.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (N, H, S, D)
        return self.proj(out.transpose(1, 2).reshape(N, S, C))


class VisionMLP(nn.Module):
    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        width, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(width, inner, bias=True)
        self.up_proj = nn.Linear(width, inner, bias=True)
        self.down_proj = nn.Linear(inner, width, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class VisionBlock(nn.Module):
    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(config.hidden_size, 1e-6)
        self.norm2 = RMSNorm(config.hidden_size, 1e-6)
        self.attn = VisionAttention(config)
        self.mlp = VisionMLP(config)

    def forward(self, x, rope, mask):
        x = x + self.attn(self.norm1(x), rope, mask)
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        kernel = (config.temporal_patch_size, config.patch_size, config.patch_size)
        self.proj = nn.Conv3d(
            config.in_channels, config.hidden_size, kernel, stride=kernel, bias=False
        )

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        # kernel == stride: the convolution is one linear map of each flattened patch
        weight = self.proj.weight.flatten(1)  # (C_out, C*T*P*P)
        return F.linear(patches.to(weight.dtype), weight)  # (N, S, C_out)


class PatchMerger(nn.Module):
    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        self.unit = config.spatial_merge_size**2
        inner = config.hidden_size * self.unit
        self.ln_q = RMSNorm(config.hidden_size, MERGER_EPS)
        self.mlp = nn.Sequential(
            nn.Linear(inner, inner), nn.GELU(), nn.Linear(inner, config.out_hidden_size)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, S, C = x.shape
        return self.mlp(self.ln_q(x).reshape(N, S // self.unit, self.unit * C))  # (N, G, W)


class QwenVisionTransformer(nn.Module):
    """`visual.*` of a Qwen2.5-VL checkpoint."""

    def __init__(self, config: QwenVisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config)
        self.blocks = nn.ModuleList(VisionBlock(config) for _ in range(config.depth))
        self.merger = PatchMerger(config)

    def forward(self, patches: torch.Tensor, grid_hw: tuple[int, int]) -> torch.Tensor:
        """patches (N, g_h*g_w, C*T*P*P) of N images sharing the patch grid `grid_hw` →
        visual tokens (N, g_h*g_w/4, out_hidden_size), merged grid row-major."""
        gh, gw = grid_hw
        if patches.shape[1] != gh * gw or patches.shape[2] != self.config.patch_dim:
            raise ValueError(
                f"QwenVisionTransformer: patches {tuple(patches.shape)}, expected "
                f"(N, {gh * gw}, {self.config.patch_dim}) for grid {grid_hw}"
            )
        device = patches.device
        rope = vision_rope(self.config, gh, gw, device)
        window = window_mask(self.config, gh, gw, device)
        x = self.patch_embed(patches)  # (N, S, C)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, None if i in self.config.fullatt_block_indexes else window)
        return self.merger(x)


def patch_coordinates(config: QwenVisionConfig, gh: int, gw: int) -> tuple[torch.Tensor, ...]:
    """Row and column (S,) of each patch in the processor's order: 2 × 2 merge units
    row-major, patches row-major inside a unit."""
    m = config.spatial_merge_size
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")  # (gh, gw)
    order = (gh // m, m, gw // m, m)
    return (
        rows.reshape(order).transpose(1, 2).flatten(),
        cols.reshape(order).transpose(1, 2).flatten(),
    )


@functools.lru_cache(maxsize=8)
def _vision_rope_cpu(config: QwenVisionConfig, gh: int, gw: int) -> tuple[torch.Tensor, ...]:
    rows, cols = patch_coordinates(config, gh, gw)
    quarter = config.head_dim // 2  # frequencies of one spatial axis span head_dim / 2
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, quarter, 2).float() / quarter)
    angles = torch.cat([rows[:, None] * inv_freq, cols[:, None] * inv_freq], dim=-1)  # (S, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (S, D) half-split layout
    return angles.cos(), angles.sin()


def vision_rope(config, gh, gw, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (S, D) float32 of the 2-D rotary embedding."""
    cos, sin = _vision_rope_cpu(config, gh, gw)
    return cos.to(device), sin.to(device)


@functools.lru_cache(maxsize=8)
def _window_mask_cpu(config: QwenVisionConfig, gh: int, gw: int) -> torch.Tensor:
    rows, cols = patch_coordinates(config, gh, gw)
    side = config.window_size // config.patch_size  # patches per window side (8)
    window = (rows // side) * (gw // side + 1) + cols // side  # (S,) window id
    return window[:, None] == window[None, :]  # (S, S)


def window_mask(config, gh, gw, device) -> torch.Tensor:
    """(S, S) bool: True where two patches share an attention window."""
    return _window_mask_cpu(config, gh, gw).to(device)
