"""How a verify step turns logits into a token: greedy argmax, or sampling per row.

Sampling draws one uniform number per decided position, in answer order, from the row's own
stream, so a row's tokens depend only on its own logits and stream — never on the batch it
runs in or on what the draft proposed. That makes N forked rollouts equal N independent
decodes with the same streams, and speculative sampling equal plain AR sampling.

`allowed` (V,) bool restricts the choice to the tokens the answer's grammar permits there.

Because the draws follow answer order, the uniform that will decide a slot is known before
the slot is verified: `SamplingPicker.upcoming` reads it ahead without consuming it, and the
rollouts' draft samples with the same numbers (`strategies.coupled_draft_proposal`), so a draft
and its verify agree wherever their distributions are close. Reading ahead changes no draw.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch


class Picker(Protocol):
    def prepare(self, logits: torch.Tensor, slots: np.ndarray | None = None) -> None:
        """Take the logits (B, R, V) of one forward: logits row r is window position
        `slots[r]` (ascending), or position r when `slots` is None (all W positions)."""
        ...

    def choose(self, row: int, index: int, allowed: np.ndarray | None = None) -> int:
        """The token for row `row` predicted at window position `index`."""
        ...

    def choose_rows(
        self, rows: list[int], index: int, allowed: np.ndarray | None = None
    ) -> list[int]:
        """`choose` for several rows at one position with one allowed set: the same tokens
        (and, sampling, the same draws) as choosing them one by one, in one pass."""
        ...


def slot_index(slots: np.ndarray | None) -> np.ndarray | None:
    """(max slot + 1,) the logits row of each window position (-1: not computed)."""
    if slots is None:
        return None
    index = np.full(int(slots[-1]) + 1 if len(slots) else 0, -1, dtype=np.int64)
    index[slots] = np.arange(len(slots))
    return index


class GreedyPicker:
    """argmax, no randomness (the AR-greedy reference).

    The logits stay where the model wrote them. On a GPU only the argmax of every slot
    (B, W) comes to the CPU, and the one row (V,) a constrained or sampled choice needs —
    not the whole (B, W, V) block, ~20 MB per row at a 150 k vocabulary. On the CPU the
    block is read as numpy once (cheaper than a torch index per row at a small vocabulary);
    float32 stays float32 (its argmax is its float64 copy's), sampled rows go to float64.
    """

    def __init__(self) -> None:
        self._logits = torch.zeros(0, 0, 0)
        self._host: np.ndarray | None = None  # (B, R, V) when the logits are on the CPU
        self._argmax = np.zeros((0, 0), dtype=np.int64)
        self._rows: dict[tuple[int, int], np.ndarray] = {}
        self._index: np.ndarray | None = None  # window position -> logits row

    def prepare(self, logits: torch.Tensor, slots: np.ndarray | None = None) -> None:
        self._logits = logits  # (B, R, V)
        self._index = slot_index(slots)
        if logits.device.type == "cpu":
            # float32 / float64 as they are (the argmax of a float32 row is that of its
            # float64 copy: the conversion is exact and monotone); other dtypes in float64
            exact = logits.dtype in (torch.float32, torch.float64)
            self._host = (logits if exact else logits.double()).numpy()
            self._argmax = self._host.argmax(axis=-1)  # (B, W), first maximum
        else:
            self._host = None
            self._argmax = logits.argmax(dim=-1).cpu().numpy()
            self._rows = {}

    def at(self, index: int) -> int:
        """The logits row of window position `index`."""
        if self._index is None:
            return index
        r = int(self._index[index]) if index < len(self._index) else -1
        if r < 0:
            raise IndexError(f"window position {index}: its logits were not computed")
        return r

    def row(self, row: int, index: int) -> np.ndarray:
        """The logits (V,) of one slot as float64 (exact for every model dtype)."""
        index = self.at(index)
        if self._host is not None:
            return self._host[row, index].astype(np.float64)
        key = (row, index)
        if key not in self._rows:
            self._rows[key] = self._logits[row, index].cpu().double().numpy()
        return self._rows[key]

    def choose(self, row: int, index: int, allowed: np.ndarray | None = None) -> int:
        if allowed is None:
            return int(self._argmax[row, self.at(index)])
        if self._host is not None:  # the first maximum among the allowed, in the host dtype
            return int(np.where(allowed, self._host[row, self.at(index)], -np.inf).argmax())
        return int(np.where(allowed, self.row(row, index), -np.inf).argmax())

    def choose_rows(
        self, rows: list[int], index: int, allowed: np.ndarray | None = None
    ) -> list[int]:
        return [self.choose(row, index, allowed) for row in rows]


def inverse_cdf(scaled: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Token ids (...,) drawn from softmax(scaled (..., V)) by the uniforms u (...,) in
    [0, 1): the first id whose cumulative probability exceeds u (float64, -inf: never)."""
    cdf = np.cumsum(np.exp(scaled - scaled.max(axis=-1, keepdims=True)), axis=-1)
    threshold = u * cdf[..., -1]
    if cdf.ndim == 1 and np.isfinite(threshold):  # one row: a binary search, the same id
        return np.minimum(np.searchsorted(cdf, threshold, side="right"), scaled.shape[-1] - 1)
    # searchsorted(cdf, threshold, side="right") for every row: cdf is non-decreasing
    ids = (cdf <= threshold[..., None]).sum(axis=-1)
    return np.minimum(ids, scaled.shape[-1] - 1)


def inverse_cdf_among(scaled: np.ndarray, ids: np.ndarray, u: np.float64) -> int:
    """`inverse_cdf` of scaled (V,) with every id outside `ids` (ascending) at -inf, by
    `u`, computed on the allowed entries only: a disallowed id adds exp(-inf) = 0 to the
    cumulative sum, so the partial sums at the allowed ids, the total and hence the id
    drawn are bit for bit the full computation's (a digit slot allows ~10 of the ids)."""
    V = scaled.shape[-1]
    if len(ids):
        picked = scaled[ids]
        cdf = np.cumsum(np.exp(picked - picked.max()))
        threshold = u * cdf[-1]
        if np.isfinite(threshold):
            k = int(np.searchsorted(cdf, threshold, side="right"))
            return int(ids[k]) if k < len(ids) else V - 1  # none exceeds: as the full rule
    # no allowed id, or NaN / inf sums: the full row through the batched rule itself
    full = np.full(V, -np.inf)
    full[ids] = scaled[ids]
    return int(inverse_cdf(full[None], np.asarray([u], dtype=np.float64))[0])


class SamplingPicker:
    """Sample from softmax(logits / temperature) with one numpy stream per row.

    Inverse-CDF sampling: token = first id whose cumulative probability exceeds u.
    Temperature 0 is greedy (and draws nothing).
    """

    def __init__(self, temperature: float, streams: list[np.random.Generator]) -> None:
        self.temperature = temperature
        self.streams = streams
        self._greedy = GreedyPicker()
        self._ahead: list[list[float]] = [[] for _ in streams]  # drawn, not yet used

    def prepare(self, logits: torch.Tensor, slots: np.ndarray | None = None) -> None:
        if logits.shape[0] > len(self.streams):
            raise ValueError(f"SamplingPicker: {logits.shape[0]} rows, {len(self.streams)} streams")
        self._greedy.prepare(logits, slots)

    def upcoming(self, row: int, n: int) -> np.ndarray:
        """(n,) the uniforms the row's next n sampled choices will use, not consumed."""
        ahead = self._ahead[row]
        while len(ahead) < n:
            ahead.append(self.streams[row].random())
        return np.asarray(ahead[:n], dtype=np.float64)

    def _draw(self, row: int) -> float:
        ahead = self._ahead[row]
        return ahead.pop(0) if ahead else self.streams[row].random()

    def choose(self, row: int, index: int, allowed: np.ndarray | None = None) -> int:
        if self.temperature == 0:
            return self._greedy.choose(row, index, allowed)
        scaled = self._greedy.row(row, index) / self.temperature  # (V,)
        if allowed is None:
            return int(inverse_cdf(scaled, np.float64(self._draw(row))))
        return inverse_cdf_among(scaled, np.flatnonzero(allowed), np.float64(self._draw(row)))

    def choose_rows(
        self, rows: list[int], index: int, allowed: np.ndarray | None = None
    ) -> list[int]:
        """All rows' draws in one (R, V) pass: each row still takes the next uniform of its
        own stream, and numpy's exp / cumsum along the last axis compute every row as they
        compute one, so the tokens are `choose`'s bit for bit."""
        if self.temperature == 0 or len(rows) < 2:
            return [self.choose(row, index, allowed) for row in rows]
        scaled = np.stack([self._greedy.row(row, index) for row in rows]) / self.temperature
        if allowed is not None:
            scaled = np.where(allowed, scaled, -np.inf)
        uniforms = np.asarray([self._draw(row) for row in rows], dtype=np.float64)
        return inverse_cdf(scaled, uniforms).tolist()


def rollout_streams(seed: int, num_rollouts: int, salt: int = 0) -> list[np.random.Generator]:
    """Independent, reproducible streams: rollout i uses the i-th child of (seed, salt).
    The planner salts with the observation stamp, so replays repeat and plans differ."""
    children = np.random.SeedSequence([seed % 2**64, salt % 2**64]).spawn(num_rollouts)
    return [np.random.default_rng(child) for child in children]
