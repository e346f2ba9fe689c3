"""Training-only probes: a linear read-out of the newest frame's visual tokens regressing
what the simulator knows and the policy must see (docs/ALGORITHMS.md §3.2, §3.4, §8.2).

A probe exists only in training. Its loss (mean squared error in the probe's own units,
over the samples that have a target) is added to the policy's with a weight; its gradient
reaches the vision tower and the projector only, so the visual tokens the decoder reads
must carry the quantity. Being linear, what the probe reads the decoder's first attention
layer can read too. The model folder, the prompt and the runtime do not change.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.planner_model import PlannerModelConfig

# The lead probe's targets from the gap to the nearest car ahead in the ego's lane: 10 m / gap
# (0 without one), which weighs near cars most, and min(gap, LEAD_FAR_M) / LEAD_FAR_M (1
# without one), which tells a car 50 m ahead from one 120 m ahead. Units: LEAD_SCALE.
LEAD_NEAR_M = 10.0
LEAD_MIN_M = 5.0  # nearer gaps count as this (the target stays <= 2)
LEAD_FAR_M = 100.0
LEAD_SCALE = (0.2, 0.3)
LEAD_TARGETS = len(LEAD_SCALE)


class TokenProbe(nn.Module):
    """Linear head: the newest frame's tokens of every camera (flattened) -> `len(scale)`
    targets, each as (target - centre) / scale."""

    def __init__(
        self, config: PlannerModelConfig, centre: Sequence[float], scale: Sequence[float]
    ) -> None:
        super().__init__()
        if len(centre) != len(scale):
            raise ValueError(f"centre {len(centre)} and scale {len(scale)} values differ")
        cameras, frames = len(config.camera_names), config.num_frames
        width = cameras * config.tokens_per_image * config.decoder.hidden_size
        self.head = nn.Linear(width, len(scale))
        # the newest frame of every camera in the view-major (K*T) image order
        newest = [k * frames + frames - 1 for k in range(cameras)]
        self.register_buffer("newest", torch.tensor(newest), persistent=False)
        self.register_buffer("centre", torch.tensor(centre, dtype=torch.float32), persistent=False)
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32), persistent=False)

    def forward(self, visual: torch.Tensor) -> torch.Tensor:
        """Visual tokens (B, K*T, G, W) -> predictions (B, n) in the probe's units."""
        return self.head(visual[:, self.newest].flatten(1)).float()

    def loss(self, visual: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean squared error against targets (B, n) over the finite target values (NaN:
        unknown, e.g. the hand in data recorded before it was); 0, with a gradient path,
        when none is."""
        return probe_loss(self(visual), (target.float() - self.centre) / self.scale)


def probe_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of predictions (B, n) against targets (B, n), both in the probe's
    units, over the finite target values; 0 with a gradient path when there are none."""
    known = torch.isfinite(target)
    if not bool(known.any()):
        return predicted.sum() * 0.0
    return F.mse_loss(predicted[known], target[known])


def lead_targets(lead: torch.Tensor) -> torch.Tensor:
    """The lead probe's targets (B, 2) from `lead` (B, 2): the gap in metres (inf: no car
    ahead in the lane; NaN: unknown, e.g. data recorded before the gap was) and the lead's
    speed (unused here). Unknown gaps give NaN targets, which the loss skips."""
    gap = lead[:, 0].double()
    near = torch.where(
        torch.isinf(gap), torch.zeros_like(gap), LEAD_NEAR_M / gap.clamp(min=LEAD_MIN_M)
    )
    far = gap.clamp(max=LEAD_FAR_M) / LEAD_FAR_M
    return torch.stack([near, far], dim=1).float()
