"""The numeric ego-state encoder: the ego history as a few prompt embeddings, not digits.

The digit prompt spells the ego history out as ~130 number tokens (3 rows × 6 values × 7
characters) that a small decoder has to learn to read before it can plan from them. With an
ego encoder the prompt instead holds `tokens` placeholder slots ("Ego state: ▢▢▢▢"), and
a two-layer MLP turns the (num_history, 6) history — the same rows `ego_history_array`
computes for the digit prompt — into the embeddings written into those slots, the way the
vision tower's outputs fill the image slots. The answer format (scaffold, digits, strict
parser) is unchanged, so every decoding strategy applies as before; the prompt is ~110
tokens shorter.

The inputs are divided by fixed scales (metres, m/s, m/s²: values of order one at highway
speeds) so that the encoder needs no data statistics in its folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from blockplan.model.config import ModelConfigError

# Column scales of the [x, y, vx, vy, ax, ay] history rows (ego frame at t0).
INPUT_SCALE = (10.0, 2.0, 10.0, 1.0, 2.0, 2.0)
NUM_COLUMNS = len(INPUT_SCALE)


@dataclass(frozen=True)
class EgoEncoderConfig:
    tokens: int = 4  # prompt slots the encoder fills
    rows: int = 3  # history rows it reads (the schema's num_history)
    hidden: int = 256  # the MLP's hidden width

    def __post_init__(self) -> None:
        for name in ("tokens", "rows", "hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ModelConfigError(f"ego_encoder.{name}={value!r}: must be an integer >= 1")

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "rows": self.rows, "hidden": self.hidden}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EgoEncoderConfig:
        unknown = set(d) - {"tokens", "rows", "hidden"}
        if unknown:
            raise ModelConfigError(f"ego_encoder: unknown settings {sorted(unknown)}")
        return cls(**d)


class EgoEncoder(nn.Module):
    """(rows, 6) ego history → (tokens, hidden_size) prompt embeddings."""

    def __init__(self, config: EgoEncoderConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.register_buffer(
            "scale", torch.tensor(INPUT_SCALE).repeat(config.rows), persistent=False
        )
        self.net = nn.Sequential(
            nn.Linear(config.rows * NUM_COLUMNS, config.hidden),
            nn.SiLU(),
            nn.Linear(config.hidden, config.hidden),
            nn.SiLU(),
            nn.Linear(config.hidden, config.tokens * hidden_size),
        )

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        """history (..., rows, 6) → (..., tokens, hidden_size)."""
        c = self.config
        if tuple(history.shape[-2:]) != (c.rows, NUM_COLUMNS):
            raise ValueError(
                f"ego history shape {tuple(history.shape)}: the encoder reads "
                f"({c.rows}, {NUM_COLUMNS}) rows"
            )
        dtype = self.net[0].weight.dtype
        x = history.to(dtype).flatten(-2) / self.scale.to(dtype)
        return self.net(x).unflatten(-1, (c.tokens, self.hidden_size))
