"""Export-friendly forwards of the planner's two graphs, sharing the model's parameters.

* `VisionFrame`: one camera frame → its visual tokens, identity embeddings included. The
  tower's adaptive average pooling is written as two fixed averaging matrices (exactly the
  adaptive-pooling windows), because ONNX has no adaptive pooling for sizes that do not
  divide.
* `DecoderStep`: one decoder forward over a window of W new tokens against an explicit KV
  cache of L slots — the single graph that prefill chunks, drafts, verifies and denoising
  steps all run through. Attention is eager (matmul, additive mask, softmax): the mask is an
  input, so SDPA's mask paths never need to trace.

Shapes: B batch, W window, L cache slots, H heads, Hkv KV heads, D head_dim, V vocabulary,
N layers, Hd hidden size. The window's keys come after the L cache slots, so the mask is
(B, W, L + W): column j < L is cache slot j, column L + i is window token i.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from blockplan.model.decoder import Decoder
from blockplan.model.layers import apply_rope, rope_cos_sin
from blockplan.model.vision import VisionTower

# Finite, so that an fp16 engine never computes (-inf) - (-inf); exp(-3e4) is 0 in fp32.
MASK_VALUE = -3.0e4


def adaptive_pool_matrix(size: int, out: int) -> torch.Tensor:
    """(out, size) averaging weights of `AdaptiveAvgPool` along one axis: output i averages
    inputs [floor(i·size/out), ceil((i+1)·size/out))."""
    m = torch.zeros(out, size)
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


class VisionFrame(nn.Module):
    """image (1, 3, H, W) float in [-1, 1], camera_index (1,), frame_index (1,) int64 →
    visual tokens (1, G, Hd): what `VisionTower` gives that frame inside the K×T batch."""

    def __init__(self, tower: VisionTower) -> None:
        super().__init__()
        self.tower = tower
        cfg = tower.config
        dtype = tower.camera_embed.weight.dtype
        probe = torch.zeros(1, 3, cfg.image_height, cfg.image_width, dtype=dtype)
        with torch.no_grad():
            _, _, fh, fw = tower.encoder.features(probe)[0].shape
        self.register_buffer("pool_rows", adaptive_pool_matrix(fh, cfg.grid[0]).to(dtype))
        self.register_buffer("pool_cols", adaptive_pool_matrix(fw, cfg.grid[1]).to(dtype))

    def forward(
        self, image: torch.Tensor, camera_index: torch.Tensor, frame_index: torch.Tensor
    ) -> torch.Tensor:
        t = self.tower
        features, found = t.encoder.features(image)  # (1, C, fh, fw)
        pooled = torch.einsum("gh,nchw,kw->ncgk", self.pool_rows, features, self.pool_cols)
        grid = pooled.flatten(2).transpose(1, 2)  # (1, cells, C) row-major
        encoded, _ = t.encoder.extend(grid, found, features)  # then keypoint and scene tokens
        tokens = t.projector(encoded)  # (1, G, Hd)
        cells = t.cell_embed.weight  # (G, Hd)
        identity = t.camera_embed(camera_index)  # (1, Hd)
        if t.frame_embed is not None:
            identity = identity + t.frame_embed(frame_index)
        else:  # no frame-slot embedding: frame_index adds exactly 0 but stays a graph input,
            # so every vision graph has one signature (the exporter drops unused inputs)
            identity = identity + 0.0 * frame_index.to(identity.dtype)[:, None]
        return tokens + identity[:, None] + cells[None]  # (1, G, Hd)


class DecoderStep(nn.Module):
    """One decoder step over W tokens with explicit past and new K/V.

    Inputs: inputs_embeds (B, W, Hd), positions (B, W) int64, attention_mask (B, W, L + W)
    bool (True = may attend), past_kv (N, 2, B, Hkv, L, D) rotated keys and values.
    Outputs: logits (B, W, V), new_kv (N, 2, B, Hkv, W, D) the window's rotated keys and
    values, new_raw_keys (N, B, Hkv, W, D) its keys before RoPE (the cache keeps both).
    The graph never writes the cache: the runner copies the new K/V where they belong.
    """

    def __init__(self, decoder: Decoder) -> None:
        super().__init__()
        self.decoder = decoder
        c = decoder.config
        self.num_heads, self.num_kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim, self.rope_theta = c.dim_per_head, c.rope_theta

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor,
        past_kv: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden, new_kv, new_raw = self.layers(inputs_embeds, positions, attention_mask, past_kv)
        return self.decoder.lm_head(hidden), new_kv, new_raw  # logits (B, W, V)

    def layers(
        self,
        inputs_embeds: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor,
        past_kv: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The final-norm hidden states (B, W, Hd), new_kv and new_raw_keys."""
        x = inputs_embeds  # (B, W, Hd)
        B, W, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        bias = torch.zeros(attention_mask.shape, dtype=x.dtype)
        bias = bias.masked_fill(~attention_mask, MASK_VALUE)[:, None]  # (B, 1, W, L + W)
        cos, sin = rope_cos_sin(positions, D, self.rope_theta, x.dtype)  # (B, 1, W, D)
        cos, sin = cos.transpose(1, 2), sin.transpose(1, 2)  # (B, W, 1, D): q and k heads
        new_k, new_v, new_raw = [], [], []
        for i, layer in enumerate(self.decoder.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = layer.input_layernorm(x)
            # q/k/v and gate/up as one MatMul each (the weights stack into one initializer)
            heads = _stacked(h, attn.q_proj, attn.k_proj, attn.v_proj).view(B, W, H + 2 * Hkv, D)
            qk = apply_rope(heads[:, :, : H + Hkv], cos, sin)  # (B, W, H + Hkv, D) in one pass
            q, k = qk[:, :, :H].transpose(1, 2), qk[:, :, H:].transpose(1, 2)  # (B, h, W, D)
            k_raw = heads[:, :, H : H + Hkv].transpose(1, 2)
            v = heads[:, :, H + Hkv :].transpose(1, 2)
            new_k.append(k)
            new_v.append(v)
            new_raw.append(k_raw)
            keys = torch.cat([past_kv[i, 0], k], dim=2)  # (B, Hkv, L + W, D)
            values = torch.cat([past_kv[i, 1], v], dim=2)
            out = self.attend(q, keys, values, bias)  # (B, H, W, D)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(B, W, -1))
            gate, up = _stacked(
                layer.post_attention_layernorm(x), mlp.gate_proj, mlp.up_proj
            ).chunk(2, dim=-1)
            x = x + mlp.down_proj(torch.nn.functional.silu(gate) * up)
        new_kv = torch.stack([torch.stack(new_k), torch.stack(new_v)], dim=1)
        return self.decoder.model.norm(x), new_kv, torch.stack(new_raw)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """Eager grouped-query attention: head h reads KV head h // (H / Hkv), as SDPA's
        `enable_gqa` and HF's `repeat_kv` do — by folding each KV head's query heads into
        its rows rather than copying K/V per query head."""
        B, H, W, D = q.shape
        kv_heads, groups = self.num_kv_heads, self.num_heads // self.num_kv_heads
        q = q.reshape(B, kv_heads, groups * W, D)  # head h = kv * groups + g
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)  # (B, Hkv, groups * W, L + W)
        scores = scores.view(B, kv_heads, groups, W, -1) + bias[:, :, None]
        probs = torch.softmax(scores, dim=-1).view(B, kv_heads, groups * W, -1)
        return (probs @ v).view(B, H, W, D)  # (B, H, W, D)


class CachedDecoderStep(nn.Module):
    """The maths of the dynamic-shape decoder step ONNX Runtime runs (`decoder_dynamic.onnx`,
    written node by node in `export/ort_step.py`, whose docstring gives the signature):
    `DecoderStep` reading the engine's cache in place and computing only the logits the
    engine asks for. The reference that graph is tested against, and what
    `TorchGraphExecutor` runs in its place.

    Inputs: inputs_embeds (B, W, Hd), positions (B, W) int64, attention_mask (B, W, L) bool
    over the past slots then the window (L = past + W: the engine's own mask), past: per
    layer its cached keys then values, (B, Hkv, M, D) each with M >= past slots (slots
    [0, past) are attended to), logit_rows (R,) int64 window positions.
    Outputs: logits (B, R, V), new_kv (B, 2N·Hkv, W, D), new_raw_keys (B, N·Hkv, W, D).
    """

    def __init__(self, decoder: Decoder) -> None:
        super().__init__()
        self.step = DecoderStep(decoder)

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor,
        past: tuple[torch.Tensor, ...],
        logit_rows: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, W = inputs_embeds.shape[0], inputs_embeds.shape[1]
        P = attention_mask.shape[2] - W
        layers = [
            torch.stack([past[2 * i][:, :, :P], past[2 * i + 1][:, :, :P]])
            for i in range(len(past) // 2)
        ]
        hidden, new_kv, new_raw = self.step.layers(
            inputs_embeds, positions, attention_mask, torch.stack(layers)
        )
        logits = self.step.decoder.lm_head(hidden.index_select(1, logit_rows))  # (B, R, V)
        D = new_kv.shape[-1]
        new_kv = new_kv.permute(2, 0, 1, 3, 4, 5).reshape(B, -1, W, D)  # (B, 2N·Hkv, W, D)
        new_raw = new_raw.permute(1, 0, 2, 3, 4).reshape(B, -1, W, D)  # (B, N·Hkv, W, D)
        return logits, new_kv, new_raw


def _stacked(x: torch.Tensor, *linears: nn.Linear) -> torch.Tensor:
    """The linears' outputs side by side, as one linear over their stacked weights."""
    weight = torch.cat([lin.weight for lin in linears])
    bias = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
    return torch.nn.functional.linear(x, weight, bias)
