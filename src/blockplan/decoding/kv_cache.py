"""KVCache: preallocated K/V buffers with verbs (commit, fork, rebase, append,
reset).

Layout: `kv` (layers, 2, batch, kv_heads, max_len, head_dim) holding the rotated keys and the
values attention reads, `raw_keys` (layers, batch, kv_heads, max_len, head_dim) the same keys
*before* RoPE, and `positions` (batch, max_len) each slot's rotary position. With the pre-RoPE
key and the position, a slot can be re-based to a new position exactly (`rebase`,
docs/ALGORITHMS.md §6: rotating a stored rotated key again would accumulate rounding).

A forward writes its S new tokens at slots [length, length + S) and sees [0, length + S);
they stay *pending* until `commit(n)` keeps the first n of them. A later forward overwrites
whatever was not committed — that is how draft windows and rejected tokens are discarded.
Nothing is allocated after construction.

`spare_slots` extra slots after `max_len` belong to no token: the static-shape decode of
`backends/graphs.py` sends its pad rows' K/V there (no forward the engine runs can reach
them: `max_len` stays the limit).
"""

from __future__ import annotations

import torch

from blockplan.model.config import DecoderConfig
from blockplan.model.layers import apply_rope, rope_cos_sin


class KVCacheFullError(RuntimeError):
    """A forward would write past `max_len`."""


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int,
        max_batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        spare_slots: int = 0,
    ) -> None:
        slots = max_len + spare_slots
        shape = (num_layers, 2, max_batch, num_kv_heads, slots, head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)
        self.raw_keys = torch.zeros(
            (num_layers, max_batch, num_kv_heads, slots, head_dim), dtype=dtype, device=device
        )
        self.rope_theta = 10000.0  # set by `for_model`; used by `rebase`
        self.positions = torch.zeros(max_batch, slots, dtype=torch.long, device=device)
        self.spare_slots = spare_slots
        self.max_len = max_len
        self.max_batch = max_batch
        self.length = 0  # committed slots
        self.batch_size = 1  # active rows
        self.num_pending = 0  # slots written by the last forward, not committed
        self._views: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] = ()
        self._views_batch = 0

    def layer_views(self) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]:
        """Per layer (raw keys, keys, values) of the active rows, (B, Hkv, max_len, D) each:
        made once per batch size, so a write is a narrow and a copy, not an index chain."""
        if self._views_batch != self.batch_size:
            B = self.batch_size
            self._views = tuple(
                (self.raw_keys[i, :B], self.kv[i, 0, :B], self.kv[i, 1, :B])
                for i in range(self.kv.shape[0])
            )
            self._views_batch = B
        return self._views

    @classmethod
    def for_model(
        cls,
        config: DecoderConfig,
        max_len: int,
        max_batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        spare_slots: int = 0,
    ) -> KVCache:
        cache = cls(
            config.num_hidden_layers,
            config.num_key_value_heads,
            config.dim_per_head,
            max_len,
            max_batch,
            dtype,
            device,
            spare_slots,
        )
        cache.rope_theta = config.rope_theta
        return cache

    # ---- the KVStore protocol the decoder writes through ---------------------------------

    def write_positions(self, positions: torch.Tensor) -> None:
        """Store positions (B, S) of the new tokens."""
        B, S = positions.shape
        end = self.length + S
        if end > self.max_len:
            raise KVCacheFullError(f"KVCache: {end} slots needed, max_len={self.max_len}")
        if self.batch_size != B:
            raise ValueError(f"KVCache: batch {B} given, {self.batch_size} rows active")
        if positions.device.type == "cpu" and self.positions.device.type == "cpu":
            self.positions.numpy()[:B, self.length : end] = positions.numpy()  # no torch op
        else:
            self.positions[:B, self.length : end] = positions
        self.num_pending = S

    def write(
        self, layer: int, k_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store pre-RoPE keys, rotated keys and values (B, Hkv, S, D) at the pending slots;
        return the rotated keys and values of slots [0, length + S), (B, Hkv, L, D) each."""
        S, start = k.shape[2], self.length
        raw_all, k_all, v_all = self.layer_views()[layer]  # (B, Hkv, max_len, D) each
        raw_all.narrow(2, start, S).copy_(k_raw)
        k_all.narrow(2, start, S).copy_(k)
        v_all.narrow(2, start, S).copy_(v)
        return k_all.narrow(2, 0, start + S), v_all.narrow(2, 0, start + S)

    # ---- verbs -----------------------------------------------------------------------------

    def commit(self, n: int) -> None:
        """Keep the first n pending slots of the last forward."""
        if not 0 <= n <= self.num_pending:
            raise ValueError(f"KVCache.commit({n}): only {self.num_pending} slots pending")
        self.length += n
        self.num_pending = 0

    def fork(self, n: int) -> None:
        """Broadcast row 0's committed prefix into rows [0, n) and make n rows active.

        The prefix is copied, not recomputed: the shared-prefix rollouts start from here.
        """
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"KVCache.fork({n}): max_batch={self.max_batch}")
        L = self.length
        self.kv[:, :, 1:n, :, :L] = self.kv[:, :, :1, :, :L]
        self.raw_keys[:, 1:n, :, :L] = self.raw_keys[:, :1, :, :L]
        self.positions[1:n, :L] = self.positions[:1, :L]
        self.batch_size = n
        self.num_pending = 0

    def rebase(self, start: int, end: int, positions: torch.Tensor) -> None:
        """Give committed slots [start, end) new rotary positions (end - start,), re-rotating
        their keys from the pre-RoPE copies: exact, because ⟨R(p)q, R(s)k⟩ depends only on
        s - p. (Values do not depend on the position.)"""
        if not 0 <= start <= end <= self.length:
            raise ValueError(f"KVCache.rebase({start}, {end}): only {self.length} committed")
        B = self.batch_size
        pos = positions.to(self.positions.device).expand(B, end - start)  # (B, n)
        self.positions[:B, start:end] = pos
        head_dim = self.kv.shape[-1]
        cos, sin = rope_cos_sin(pos, head_dim, self.rope_theta, self.kv.dtype)  # (B, 1, n, D)
        raw = self.raw_keys[:, :B, :, start:end]  # (layers, B, Hkv, n, D)
        self.kv[:, 0, :B, :, start:end] = apply_rope(raw, cos, sin)

    def append(self, raw_keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        """Commit n slots after the committed ones (one active row) from pre-RoPE keys and
        values (layers, kv_heads, n, head_dim), rotating the keys at `positions` (n,): how the
        streaming prefill places cached header and frame K/V at their current slots."""
        n = positions.shape[0]
        if self.batch_size != 1:
            raise ValueError(f"KVCache.append: {self.batch_size} rows active, needs 1")
        if self.length + n > self.max_len:
            raise KVCacheFullError(f"KVCache: {self.length + n} slots, max_len={self.max_len}")
        start, end = self.length, self.length + n
        self.raw_keys[:, 0, :, start:end] = raw_keys
        self.kv[:, 1, 0, :, start:end] = values
        self.length, self.num_pending = end, 0
        self.rebase(start, end, positions)

    def reset(self) -> None:
        """Empty the cache (one row active); the buffers are kept."""
        self.length = 0
        self.batch_size = 1
        self.num_pending = 0
