"""The flow-matching trajectory head (docs/ALGORITHMS.md §7.1).

A small transformer over the 5 waypoints (one token each) that predicts the velocity field
v(x_τ, τ | prefix) of a rectified flow from Gaussian noise (τ = 0) to the normalised
waypoints (τ = 1). It reads the decoder's prefix — the prompt and the reasoning sections —
straight from the decoder's K/V: head layer i cross-attends to the pre-RoPE keys and the
values of decoder layer `read_layers[i]`, as the KV cache holds them after the text sections
are decoded (training reads the same K/V from the clean, token-causal stream). Nothing about
the prefix is recomputed per Euler step, so a step costs one head forward.

`integrate` runs K Euler steps; `evaluate_steps` (1-based) are the steps at which the network
is evaluated, every other step reuses the last computed velocity (FlashDrive's adaptive step
caching). All steps evaluated is plain Euler.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.layers import RMSNorm

TRAJECTORY_HEADS = ("tokens", "flow")
NUM_WAYPOINTS = 5
NUM_AXES = 2


@dataclass(frozen=True)
class FlowHeadConfig:
    """The head's size, which decoder layers it reads, and the waypoint normalisation.

    `waypoint_mean` / `waypoint_std` (10 values, waypoint-major x, y): the head works in
    (w - mean) / std; training sets them from its data set."""

    width: int = 128
    num_layers: int = 2
    num_heads: int = 2
    mlp_ratio: int = 2
    read_layers: tuple[int, ...] = (-2, -1)  # decoder layer per head layer (negative: from the end)
    waypoint_mean: tuple[float, ...] = field(
        default_factory=lambda: tuple(v for i in range(NUM_WAYPOINTS) for v in (6.0 * (i + 1), 0.0))
    )
    waypoint_std: tuple[float, ...] = field(
        default_factory=lambda: tuple(v for i in range(NUM_WAYPOINTS) for v in (4.0 * (i + 1), 1.0))
    )

    def __post_init__(self) -> None:
        n = NUM_WAYPOINTS * NUM_AXES
        if self.width < 8 or self.width % self.num_heads:
            raise ModelConfigError(
                f"flow_head.width={self.width}: must be >= 8 and divisible by num_heads"
            )
        if self.num_layers < 1 or len(self.read_layers) != self.num_layers:
            raise ModelConfigError(
                f"flow_head.read_layers={list(self.read_layers)}: one decoder layer per head "
                f"layer ({self.num_layers})"
            )
        if len(self.waypoint_mean) != n or len(self.waypoint_std) != n:
            raise ModelConfigError(f"flow_head.waypoint_mean/std: {n} values each")
        if not all(math.isfinite(s) and s > 0 for s in self.waypoint_std):
            raise ModelConfigError("flow_head.waypoint_std: every value must be > 0")
        if not all(math.isfinite(m) for m in self.waypoint_mean):
            raise ModelConfigError("flow_head.waypoint_mean: every value must be finite")

    def decoder_layers(self, decoder: DecoderConfig) -> tuple[int, ...]:
        """`read_layers` as indices 0..L-1 of `decoder`'s layers; raises if out of range."""
        L = decoder.num_hidden_layers
        out = []
        for i in self.read_layers:
            if not -L <= i < L:
                raise ModelConfigError(f"flow_head.read_layers: {i} outside the {L} layers")
            out.append(i % L)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlowHeadConfig:
        from blockplan.model.config import check_section

        d = check_section(cls, d, "flow_head.", unknown=True)
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**kw)


MASK_VALUE = -3.0e4  # finite: an fp16 graph never computes (-inf) - (-inf)


def attend(
    q: torch.Tensor,  # (B, H, N, D)
    k: torch.Tensor,  # (B, Hkv, L, D), H a multiple of Hkv
    v: torch.Tensor,  # (B, Hkv, L, D)
    bias: torch.Tensor | None = None,  # (B, 1, 1, L) additive
) -> torch.Tensor:
    """Softmax attention written out (matmul, softmax), so the head exports to ONNX as is;
    the query heads share the key/value heads in groups."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, N, L)
    if bias is not None:
        scores = scores + bias
    return torch.softmax(scores, dim=-1) @ v  # (B, H, N, D)


def time_embedding(tau: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features (B, dim) of flow times τ (B,) in [0, 1]."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(1000.0) * torch.arange(half, dtype=tau.dtype, device=tau.device) / half
    )
    angles = 100.0 * tau[:, None] * freqs[None]  # (B, half): periods from 0.06 to ~60
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class FlowLayer(nn.Module):
    """Self-attention over the waypoint tokens, cross-attention to one decoder layer's
    prefix K/V (grouped-query: the head's query heads share the decoder's KV heads), MLP."""

    def __init__(self, config: FlowHeadConfig, decoder: DecoderConfig) -> None:
        super().__init__()
        W = config.width
        self.num_heads = config.num_heads
        self.kv_heads = decoder.num_key_value_heads
        self.head_dim = decoder.dim_per_head
        # the decoder's query heads per KV head, at least one
        self.cross_heads = max(decoder.num_attention_heads, self.kv_heads)
        eps = decoder.rms_norm_eps
        self.norm1 = RMSNorm(W, eps)
        self.qkv = nn.Linear(W, 3 * W)
        self.proj = nn.Linear(W, W)
        self.norm2 = RMSNorm(W, eps)
        self.cross_q = nn.Linear(W, self.cross_heads * self.head_dim)
        self.cross_o = nn.Linear(self.cross_heads * self.head_dim, W)
        self.norm3 = RMSNorm(W, eps)
        self.fc1 = nn.Linear(W, config.mlp_ratio * W)
        self.fc2 = nn.Linear(config.mlp_ratio * W, W)
        self.film = nn.Linear(W, 2 * W)  # time conditioning: scale and shift after norm1

    def forward(
        self,
        x: torch.Tensor,  # (B, N, W) waypoint tokens
        t: torch.Tensor,  # (B, W) time features
        keys: torch.Tensor,  # (B, Hkv, L, D) pre-RoPE keys of the prefix
        values: torch.Tensor,  # (B, Hkv, L, D)
        bias: torch.Tensor | None = None,  # (B, 1, 1, L) additive: padded key slots
    ) -> torch.Tensor:
        B, N, W = x.shape
        scale, shift = self.film(t)[:, None].chunk(2, dim=-1)  # (B, 1, W) each
        h = self.norm1(x) * (1 + scale) + shift
        q, k, v = self.qkv(h).view(B, N, 3, self.num_heads, W // self.num_heads).unbind(2)
        a = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, W))
        q = self.cross_q(self.norm2(x)).view(B, N, self.cross_heads, self.head_dim).transpose(1, 2)
        c = attend(q, keys, values, bias)  # (B, Hc, N, D)
        x = x + self.cross_o(c.transpose(1, 2).reshape(B, N, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm3(x))))


class FlowHead(nn.Module):
    """v(x_τ, τ | prefix K/V) in normalised waypoint units."""

    def __init__(self, config: FlowHeadConfig, decoder: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.layer_indices = config.decoder_layers(decoder)
        W = config.width
        self.inp = nn.Linear(NUM_AXES, W)
        self.slot = nn.Parameter(torch.zeros(NUM_WAYPOINTS, W))
        self.time = nn.Sequential(nn.Linear(W, W), nn.SiLU(), nn.Linear(W, W))
        self.layers = nn.ModuleList(FlowLayer(config, decoder) for _ in range(config.num_layers))
        self.norm = RMSNorm(W, decoder.rms_norm_eps)
        self.out = nn.Linear(W, NUM_AXES)
        nn.init.normal_(self.slot, 0.0, 0.02)
        self.register_buffer(
            "mean",
            torch.tensor(config.waypoint_mean).view(NUM_WAYPOINTS, NUM_AXES),
            persistent=False,
        )
        self.register_buffer(
            "std",
            torch.tensor(config.waypoint_std).view(NUM_WAYPOINTS, NUM_AXES),
            persistent=False,
        )

    def forward(
        self,
        x: torch.Tensor,  # (B, 5, 2) normalised waypoints at time τ
        tau: torch.Tensor,  # (B,)
        keys: torch.Tensor,  # (R, B, Hkv, L, D): the prefix keys of the R read layers
        values: torch.Tensor,  # (R, B, Hkv, L, D)
        key_mask: torch.Tensor | None = None,  # (B, L) bool, True = a prefix slot (exported graphs)
    ) -> torch.Tensor:
        """The velocity (B, 5, 2). `key_mask` hides padded key slots: an exported graph
        takes the prefix padded to the cache's length."""
        h = self.inp(x) + self.slot  # (B, 5, W)
        t = self.time(time_embedding(tau.to(x.dtype), self.config.width))  # (B, W)
        bias = None
        if key_mask is not None:
            bias = torch.where(key_mask, 0.0, MASK_VALUE).to(x.dtype)[:, None, None]  # (B,1,1,L)
        for i, layer in enumerate(self.layers):
            h = layer(h, t, keys[i], values[i], bias)
        return self.out(self.norm(h))

    def normalise(self, waypoints: torch.Tensor) -> torch.Tensor:
        return (waypoints - self.mean.to(waypoints.dtype)) / self.std.to(waypoints.dtype)

    def denormalise(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std.to(x.dtype) + self.mean.to(x.dtype)


def check_schedule(num_steps: int, evaluate_steps: Sequence[int]) -> tuple[int, ...]:
    """The 1-based steps at which the network runs, sorted; step 1 is always among them
    (there is no velocity to reuse before it). Empty `evaluate_steps`: every step."""
    if num_steps < 1:
        raise ValueError(f"flow.num_steps={num_steps}: must be >= 1")
    steps = tuple(sorted(set(int(s) for s in evaluate_steps))) or tuple(range(1, num_steps + 1))
    if steps[0] != 1 or steps[-1] > num_steps:
        raise ValueError(
            f"flow.evaluate_steps={list(evaluate_steps)}: must include step 1 and lie in "
            f"[1, {num_steps}]"
        )
    return steps


def integrate(
    velocity,  # (x (B,5,2), tau (B,)) -> (B,5,2); the head with its prefix bound
    noise: torch.Tensor,  # (B, 5, 2) x at τ = 0
    num_steps: int,
    evaluate_steps: Sequence[int] = (),
) -> tuple[torch.Tensor, int]:
    """Euler from τ = 0 to 1 in `num_steps` equal steps, the network evaluated at
    `evaluate_steps` only (`check_schedule`); returns x at τ = 1 and the evaluations made."""
    steps = set(check_schedule(num_steps, evaluate_steps))
    x, v, dt = noise, None, 1.0 / num_steps
    calls = 0
    for k in range(1, num_steps + 1):
        if k in steps:
            tau = torch.full((x.shape[0],), (k - 1) * dt, dtype=x.dtype, device=x.device)
            v = velocity(x, tau)
            calls += 1
        x = x + dt * v
    return x, calls


class KVRecorder:
    """A KV store for a training forward without a cache: it keeps the pre-RoPE keys and the
    values of some layers (what the KV cache would hold) and hands attention the new K/V."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = tuple(layers)
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.length = 0

    def write_positions(self, positions: torch.Tensor) -> None:
        pass

    def write(
        self, layer: int, k_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.layers:
            self.keys[layer], self.values[layer] = k_raw, v
        return k, v

    def prefix(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, B, Hkv, length, D) keys and values of the first `length` slots."""
        keys = torch.stack([self.keys[i][:, :, :length] for i in self.layers])
        values = torch.stack([self.values[i][:, :, :length] for i in self.layers])
        return keys, values


def cache_prefix(cache, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, B, Hkv, L, D) pre-RoPE keys and values of the committed slots of a `KVCache`
    (its active rows) at decoder layers `layers`."""
    B, L = cache.batch_size, cache.length
    idx = list(layers)
    return cache.raw_keys[idx, :B, :, :L], cache.kv[idx, 1, :B, :, :L]
