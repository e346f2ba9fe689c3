"""The flow trajectory head at serving time (docs/ALGORITHMS.md §7.1).

After the text sections are decoded, the KV cache holds the prompt and the reasoning — the
prefix the head reads. `FlowSampler.sample` integrates the head's velocity field from
Gaussian noise with the configured schedule (`flow.num_steps`, `flow.evaluate_steps`: the
adaptive step caching), for N noise samples in one batch over the forked cache rows.

Noise: one plan (N = 1) always starts from the same seeded noise, so a replay reproduces
it and consecutive plans do not jitter from noise alone; N rollouts draw from the rollout
streams (seed, observation stamp) like the token rollouts' sampling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.picking import rollout_streams
from blockplan.model.flow_head import (
    NUM_AXES,
    NUM_WAYPOINTS,
    FlowHead,
    cache_prefix,
    check_schedule,
    integrate,
)

# velocity(x (B,5,2), tau (B,), keys (R,B,Hkv,L,D), values) -> (B,5,2), normalised units
Velocity = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def flow_noise(seed: int, num_rollouts: int, salt: int = 0) -> np.ndarray:
    """(N, 5, 2) standard normal x at τ = 0. N = 1: the fixed noise of (seed) — every
    plan the same; N > 1: row i from rollout stream i of (seed, salt)."""
    if num_rollouts == 1:
        salt = 0
    streams = rollout_streams(seed, num_rollouts, salt)
    return np.stack([g.standard_normal((NUM_WAYPOINTS, NUM_AXES)) for g in streams])


@dataclass
class FlowSampler:
    """The head, its schedule, and what evaluates it (the torch head, or a backend's
    exported graph via `velocity`)."""

    head: FlowHead
    num_steps: int = 8
    evaluate_steps: tuple[int, ...] = (1, 2, 7, 8)
    velocity: Velocity | None = None

    def __post_init__(self) -> None:
        self.evaluate_steps = check_schedule(self.num_steps, self.evaluate_steps)

    @property
    def read_layers(self) -> tuple[int, ...]:
        return self.head.layer_indices

    def prefix(self, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's view of the cache: (R, B, Hkv, L, D) pre-RoPE keys and values."""
        return cache_prefix(cache, self.read_layers)

    @torch.no_grad()
    def sample(
        self,
        cache: KVCache,
        noise: np.ndarray | torch.Tensor,  # (B, 5, 2), B = the cache's active rows
        evaluate_steps: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, int]:
        """Waypoints (B, 5, 2) in metres (float64) and the head evaluations made;
        `evaluate_steps` overrides the configured schedule (the bench: uncached)."""
        keys, values = self.prefix(cache)
        return self.sample_prefix(keys, values, noise, evaluate_steps)

    @torch.no_grad()
    def sample_prefix(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        noise: np.ndarray | torch.Tensor,
        evaluate_steps: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, int]:
        dtype, device = keys.dtype, keys.device
        x0 = torch.as_tensor(np.asarray(noise), dtype=dtype).to(device)
        if x0.shape[0] != keys.shape[1]:
            raise ValueError(f"noise for {x0.shape[0]} rows, the cache has {keys.shape[1]}")
        run = self.velocity or self.head

        def velocity(x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
            return run(x, tau, keys, values)

        steps = self.evaluate_steps if evaluate_steps is None else evaluate_steps
        x1, calls = integrate(velocity, x0, self.num_steps, steps)
        return self.head.denormalise(x1).double().cpu().numpy(), calls
