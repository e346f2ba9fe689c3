"""The decoder's inference forward with the per-op overhead taken out.

The same arithmetic as `Decoder`'s module-by-module forward (`layers.py`), fewer and larger
ops, no `nn.Module` calls:

* the q/k/v projections run as one linear, gate/up as one (weights concatenated once and
  re-made when a parameter changes; the state dict keeps its HF names — the fused copies
  live here, not in the module tree) — where that is exact on this machine's GEMM kernels
  (`fuses_exactly`; float32 on our CPUs), else as separate linears;
* RoPE cos/sin come from a table of every position (grown on demand), and q and k are
  rotated in one pass.

Every op computes what the reference computes, value for value: concatenating weights
along the output dimension leaves each output column's dot product as it was, elementwise
ops give the same numbers on strided views, a table row is the cos / sin the reference
computes for that position. The tests check the outputs bitwise against the reference
forward (tests/model/test_fast_forward.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import DecoderConfig
from blockplan.model.layers import KVStore, rope_cos_sin

# Row counts a fusion is checked at (GEMM kernels choose their blocking by shape).
PROBE_ROWS = (1, 2, 3, 5, 8, 17, 32)
# Larger projections stay apart: the stacked copy would double their memory (a 3B model's
# gate/up: 180 MB per layer in float32) to save one call on a GEMM that takes milliseconds.
MAX_FUSED_ELEMENTS = 4_000_000
_fuses_exactly: dict[tuple, bool] = {}


def fuses_exactly(
    width: int, outs: tuple[int, ...], bias: bool, dtype: torch.dtype, device: torch.device
) -> bool:
    """Whether one linear with the weights of `outs` stacked gives, bit for bit, the
    separate linears' outputs side by side, on this machine's kernels (checked once per
    shape on random values at `PROBE_ROWS` rows). Float32 on our CPUs: yes; MKL's float64
    GEMM blocks differently by output width: not always."""
    key = (width, outs, bias, dtype, device.type)
    if key not in _fuses_exactly:
        gen = torch.Generator().manual_seed(0)

        def rand(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device, dtype)

        weights = [rand(n, width) for n in outs]
        biases = [rand(n) if bias else None for n in outs]
        fused_w = torch.cat(weights)
        fused_b = torch.cat(biases) if bias else None
        ok = True
        for m in PROBE_ROWS:
            x = rand(m, width)
            apart = torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases, strict=True)], -1)
            ok = ok and torch.equal(F.linear(x, fused_w, fused_b), apart)
        _fuses_exactly[key] = ok
    return _fuses_exactly[key]


@dataclass(frozen=True)
class Projection:
    """Linears sharing an input, as one stacked linear where that is exact, else apart;
    either way the output is theirs side by side, (..., sum of widths)."""

    weights: tuple[torch.Tensor, ...]
    biases: tuple[torch.Tensor | None, ...]
    # quantized linears (model/quantized.py) run as their own modules, apart
    modules: tuple[nn.Module, ...] = ()

    @classmethod
    def of(cls, linears: list[nn.Module]) -> Projection:
        if not all(isinstance(lin, nn.Linear) for lin in linears):
            return cls((), (), tuple(linears))
        w = [lin.weight.detach() for lin in linears]
        b = [None if lin.bias is None else lin.bias.detach() for lin in linears]
        has_bias = b[0] is not None
        if len(w) == 1:
            return cls(tuple(w), tuple(b))
        outs = tuple(t.shape[0] for t in w)
        small = sum(outs) * w[0].shape[1] <= MAX_FUSED_ELEMENTS
        if small and fuses_exactly(w[0].shape[1], outs, has_bias, w[0].dtype, w[0].device):
            return cls((torch.cat(w),), (torch.cat(b) if has_bias else None,))
        return cls(tuple(w), tuple(b))

    @property
    def fused(self) -> bool:
        return len(self.weights) == 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.modules:
            parts = [module(x) for module in self.modules]
            return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        if len(self.weights) == 1:
            return F.linear(x, self.weights[0], self.biases[0])
        parts = [F.linear(x, w, b) for w, b in zip(self.weights, self.biases, strict=True)]
        return torch.cat(parts, dim=-1)


@dataclass(frozen=True)
class LayerWeights:
    ln1: torch.Tensor  # (Hd,) input_layernorm
    qkv: Projection  # q, k, v: (..., (H + 2 Hkv) D)
    o: Projection  # o_proj: (..., Hd)
    ln2: torch.Tensor  # (Hd,) post_attention_layernorm
    gate_up: Projection  # gate, up: (..., 2 I)
    down: Projection  # down_proj: (..., Hd)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`layers.RMSNorm.forward` as a function: ATen's `rms_norm` (one call, the same values
    in float32 / float64 — the tests check it), the reference's ops for other dtypes."""
    dtype = x.dtype
    if dtype in (torch.float32, torch.float64):
        return torch.rms_norm(x, weight.shape, weight, eps)  # F.rms_norm without its wrapper
    compute = torch.promote_types(dtype, torch.float32)
    h = x if compute == dtype else x.to(compute)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h if compute == dtype else h.to(dtype))


class FastForward:
    """The fused weights and RoPE tables of one `Decoder`, and its no-grad forward.

    Holds no reference to the decoder (which owns it): the decoder is passed to each call.
    """

    def __init__(self, config: DecoderConfig) -> None:
        self.config = config
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.dim_per_head
        self.eps = config.rms_norm_eps
        self.key: tuple | None = None
        self.owner: int | None = None  # id of the decoder `sources` point into
        self.sources: list[tuple[dict, str]] = []  # (module._parameters, name) of the layers
        self.layers: tuple[LayerWeights, ...] = ()
        self.cos = self.sin = torch.zeros(0, 0)

    def refresh(self, decoder: nn.Module) -> None:
        """Re-fuse when any parameter was replaced, moved, cast or changed in place."""
        if self.owner != id(decoder):  # first call, or a copy of the decoder
            self.sources = [
                (module._parameters, name)
                for layer in decoder.model.layers
                for module in layer.modules()
                for name in module._parameters
            ]
            self.owner, self.key = id(decoder), None
        # checked every forward: ~40 dict lookups, not a walk of the module tree
        key = tuple(
            (id(t), t.data_ptr(), t._version) for d, n in self.sources if (t := d[n]) is not None
        )
        if key == self.key:
            return
        layers = []
        with torch.no_grad():
            for layer in decoder.model.layers:
                a, m = layer.self_attn, layer.mlp
                layers.append(
                    LayerWeights(
                        ln1=layer.input_layernorm.weight.detach(),
                        qkv=Projection.of([a.q_proj, a.k_proj, a.v_proj]),
                        o=Projection.of([a.o_proj]),
                        ln2=layer.post_attention_layernorm.weight.detach(),
                        gate_up=Projection.of([m.gate_proj, m.up_proj]),
                        down=Projection.of([m.down_proj]),
                    )
                )
        self.layers = tuple(layers)
        self.cos = self.sin = torch.zeros(0, 0)  # the dtype or device may have changed
        self.key = key

    def rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin (B, S, 1, D) of positions (B, S), or (3, B, S) for
        multimodal RoPE.

        1-D positions read rows of a table of positions 0..n-1 made by `rope_cos_sin` itself
        (each row is what it gives for that position; grown on demand). The sin's first half
        is negated: x·cos + rotate_half(x)·sin = x·cos + swap_halves(x)·sin', exactly (a sign
        flip is exact), which saves a negation and a concatenation per layer.
        """
        c = self.config
        lo, hi = (int(t) for t in torch.aminmax(positions)) if positions.numel() else (0, 0)
        if positions.dim() == 3 or lo < 0:  # multimodal (or negative): computed per forward
            mrope = c.mrope_section if positions.dim() == 3 else None
            cos, sin = rope_cos_sin(positions, c.dim_per_head, c.rope_theta, dtype, mrope)
            return cos.transpose(1, 2), _fold_sign(sin).transpose(1, 2)
        n = self.cos.shape[0]
        if hi >= n or self.cos.dtype != dtype or self.cos.device != positions.device:
            size = max(hi + 1, 2 * n, min(c.max_position_embeddings, 4096))
            table = torch.arange(size, device=positions.device)[None]
            cos, sin = rope_cos_sin(table, c.dim_per_head, c.rope_theta, dtype)  # (1, 1, n, D)
            self.cos, self.sin = cos[0, 0, :, None], _fold_sign(sin[0, 0, :, None])  # (n, 1, D)
        return self.cos[positions], self.sin[positions]  # (B, S, 1, D)

    def __call__(
        self,
        decoder: nn.Module,
        x: torch.Tensor,  # (B, S, Hd)
        positions: torch.Tensor,  # (B, S) or (3, B, S)
        bias: torch.Tensor | None,  # (B|1, 1, S, L) additive
        cache: KVStore | None,
        rows: torch.Tensor | slice,  # which of the S rows get logits
        taps: tuple[int, ...] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logits (B, S', V) at `rows` and the final-norm hidden states (B, S, Hd), or with
        `taps` the residual stream after those layers, concatenated (B, S, len · Hd)."""
        self.refresh(decoder)
        B, S, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        half = D // 2
        cos, sin = self.rope(positions, x.dtype)  # (B, S, 1, D)
        eps = self.eps
        tapped = []
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w.ln1, eps)
            heads = w.qkv(h).view(B, S, H + 2 * Hkv, D)  # q, k, v heads
            # views by narrow (C calls; Tensor.split is a Python wrapper)
            k_raw, v = heads.narrow(2, H, Hkv), heads.narrow(2, H + Hkv, Hkv)
            qk = heads.narrow(2, 0, H + Hkv)  # q and k, rotated in one pass
            qk = qk * cos + qk.roll(half, -1) * sin  # (B, S, H + Hkv, D); roll: swap halves
            q, k = qk.narrow(2, 0, H), qk.narrow(2, H, Hkv)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, h, S, D)
            if cache is not None:
                k, v = cache.write(i, k_raw.transpose(1, 2), k, v)  # (B, Hkv, L, D)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
            x = x + w.o(out.transpose(1, 2).reshape(B, S, -1))
            gate, up = w.gate_up(rms_norm(x, w.ln2, eps)).chunk(2, dim=-1)
            # silu of a contiguous copy: a vectorized kernel's scalar tail then falls where
            # it falls on the reference's own (B, S, I) gate output, so every value matches
            x = x + w.down(F.silu(gate.contiguous()) * up)
            if taps is not None and i in taps:
                tapped.append(x)
        hidden = rms_norm(x, decoder.model.norm.weight, eps)  # (B, S, Hd)
        logits = F.linear(hidden[:, rows], decoder.lm_head.weight)  # (B, S', V)
        return logits, (hidden if taps is None else torch.cat(tapped, dim=-1))


def _fold_sign(sin: torch.Tensor) -> torch.Tensor:
    """sin (..., D) with its first half negated."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
