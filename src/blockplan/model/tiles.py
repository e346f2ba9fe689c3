"""Attention under a fixed, mostly-empty mask, cut into row tiles.

The training sequence (train/streams.py) is P + 3·A tokens long, but under its mask a query
sees under a third of the keys (29 % for the reference preset): the clean stream never reads
the noisy copies, a noisy copy never reads the other, and a noisy block reads only the clean
answer before it. Dense attention computes every (query, key) score and throws the rest away. `AttentionTiles`
plans once per mask: consecutive query rows with the same key set form a group, neighbouring
groups merge while one larger call costs less than two (an area of scores plus `call_cost`
per call), and each tile attends only to the union of its rows' keys, gathered as a few
contiguous runs, with the mask restricted to it (none where the tile sees all of them).

The result equals dense attention up to float summation order: a masked key contributes
exp(-inf) = 0 to its row's softmax either way. Tests: tests/model/test_tiles.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# One attention call's fixed cost in scores (B·H·D-sized multiply-adds), measured on one CPU
# core for the reference model's batch: below it a merge is cheaper than another call.
CALL_COST = 1024
# Tiling that saves less than this share of the dense area is not worth the extra calls.
MIN_SAVING = 0.2


@dataclass(frozen=True)
class Tile:
    rows: tuple[int, int]  # [start, end) query rows
    runs: tuple[tuple[int, int], ...]  # the keys it reads, as [start, end) runs
    allowed: torch.Tensor | None  # (rows, keys) bool, None = every key it reads

    @property
    def num_keys(self) -> int:
        return sum(end - start for start, end in self.runs)

    @property
    def area(self) -> int:
        return (self.rows[1] - self.rows[0]) * self.num_keys


def _runs(keys: torch.Tensor) -> tuple[tuple[int, int], ...]:
    """The True entries of a 1-D bool tensor as [start, end) runs."""
    idx = keys.nonzero().flatten().tolist()
    runs: list[list[int]] = []
    for i in idx:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return tuple((a, b) for a, b in runs)


def _gather(x: torch.Tensor, runs: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """x (B, H, L, D) restricted to the key runs, along dim 2."""
    if len(runs) == 1:
        start, end = runs[0]
        return x[:, :, start:end]
    return torch.cat([x[:, :, a:b] for a, b in runs], dim=2)


class AttentionTiles:
    """A fixed (S, L) bool mask (True = may attend) planned into row tiles."""

    def __init__(self, mask: torch.Tensor, call_cost: int = CALL_COST) -> None:
        if mask.dim() != 2 or mask.dtype != torch.bool:
            raise ValueError(
                f"AttentionTiles: a 2-D bool mask, not {tuple(mask.shape)} {mask.dtype}"
            )
        mask = mask.detach().cpu()
        if not bool(mask.any(dim=1).all()):
            raise ValueError("AttentionTiles: every query row must see at least one key")
        self.mask = mask
        self.tiles = self._plan(mask, call_cost)
        self._bias: dict[tuple[torch.device, torch.dtype], list[torch.Tensor | None]] = {}

    @staticmethod
    def _plan(mask: torch.Tensor, call_cost: int) -> list[Tile]:
        S, L = mask.shape
        # groups of consecutive rows with one key set: [start, end, keys]
        changes = (mask[1:] != mask[:-1]).any(dim=1).nonzero().flatten().add(1).tolist()
        bounds = [0, *changes, S]
        groups = [[a, b, mask[a]] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        merged = [groups[0]]
        for start, end, keys in groups[1:]:
            last = merged[-1]
            n1, n2 = last[1] - last[0], end - start
            union = last[2] | keys
            joined = (n1 + n2) * int(union.sum())
            apart = n1 * int(last[2].sum()) + n2 * int(keys.sum()) + call_cost
            if joined <= apart:
                last[1], last[2] = end, union
            else:
                merged.append([start, end, keys])
        tiles = []
        for start, end, keys in merged:
            sub = mask[start:end][:, keys]
            tiles.append(Tile((start, end), _runs(keys), None if bool(sub.all()) else sub))
        planned = sum(t.area for t in tiles) + call_cost * (len(tiles) - 1)
        if planned > (1 - MIN_SAVING) * S * L:  # one dense call
            return [Tile((0, S), ((0, L),), None if bool(mask.all()) else mask)]
        return tiles

    @property
    def shape(self) -> torch.Size:
        return self.mask.shape

    @property
    def area(self) -> int:
        """Scores computed per batch row and head (dense: S·L)."""
        return sum(t.area for t in self.tiles)

    def _biases(self, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor | None]:
        key = (device, dtype)
        if key not in self._bias:
            self._bias[key] = [
                None
                if t.allowed is None
                else torch.zeros(t.allowed.shape, dtype=dtype)
                .masked_fill(~t.allowed, -torch.inf)
                .to(device)
                for t in self.tiles
            ]
        return self._bias[key]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Masked attention of q (B, H, S, D) over k, v (B, Hkv, L, D): (B, H, S, D)."""
        if q.shape[2] != self.mask.shape[0] or k.shape[2] != self.mask.shape[1]:
            raise ValueError(
                f"AttentionTiles: planned for {tuple(self.mask.shape)}, "
                f"got {q.shape[2]} queries and {k.shape[2]} keys"
            )
        outs = []
        for tile, bias in zip(self.tiles, self._biases(q.device, q.dtype), strict=True):
            a, b = tile.rows
            outs.append(
                F.scaled_dot_product_attention(
                    q[:, :, a:b],
                    _gather(k, tile.runs),
                    _gather(v, tile.runs),
                    attn_mask=bias,
                    enable_gqa=True,
                )
            )
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
