"""StepBackend: the engine's forward on top of exported step graphs (ORT, TensorRT).

Bookkeeping only — the executor runs the graphs. With the dynamic-shape graph (ONNX Runtime,
`executor.dynamic`) a forward of S new tokens against a `KVCache` holding `past` committed
slots is one call at exactly those shapes: the graph reads the cache buffer in place and
computes only the logit rows the engine asks for. With static-shape graphs (TensorRT, and
exports that predate the dynamic graph) it becomes one or more graph calls:

* chunks: the S tokens are cut into chunks of at most max(W) tokens, each ending where no
  row of the chunk attends to a later token (so the prompt's frames, which see their whole
  frame, are never split; a bidirectional window wider than max(W) is an error). Chunk c sees
  the cache slots [0, past + c0) — including the slots the earlier chunks of this forward
  just wrote, still pending — and itself.
* padding: a chunk of n tokens runs in the smallest exported W >= n. Pad rows get zero
  embeddings and position 0 and attend only to themselves (no all-masked softmax row); no
  real row attends to them; their logits and K/V are dropped.
* the graph mask (B, W, L + W): column j < L is cache slot j (True where the engine's mask
  lets the row see slot j < past + c0), column L + i is the chunk's token i.
* the new K/V come back as outputs and are copied into the cache at [past + c0, past + c1);
  they stay pending until the engine commits them, exactly as with the torch forward.
"""

from __future__ import annotations

import bisect
from typing import Protocol

import numpy as np
import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.export.graphs import CachedDecoderStep, DecoderStep, VisionFrame
from blockplan.model.config import DecoderConfig
from blockplan.model.masks import causal_mask
from blockplan.model.planner_model import PlannerModel


class StepExecutor(Protocol):
    """Runs the exported graphs. Tensors in and out are float32 / int64 / bool on CPU."""

    windows: tuple[int, ...]  # exported W, ascending
    max_len: int  # L
    dynamic: bool  # `step_cached` runs any W and past (one call per forward, no padding)

    def step_cached(
        self,
        inputs_embeds: torch.Tensor | np.ndarray,  # (B, W, Hd) float32
        positions: torch.Tensor,  # (B, W) int64
        attention_mask: torch.Tensor,  # (B, W, past + W) bool
        past: tuple[np.ndarray, ...],  # 2N: layer i's keys, values (B, Hkv, M, D), M >= past
        logit_rows: np.ndarray,  # (R,) int64
    ) -> tuple[np.ndarray | torch.Tensor, ...]:
        """The dynamic graph (`export/ort_step.py`): logits (B, R, V), new_kv
        (B, 2N·Hkv, W, D), new_raw_keys (B, N·Hkv, W, D), as numpy arrays or CPU tensors.
        Slots of `past` beyond the mask's past columns are never attended to."""
        ...

    def step(
        self,
        inputs_embeds: torch.Tensor,  # (B, W, Hd)
        positions: torch.Tensor,  # (B, W) int64
        attention_mask: torch.Tensor,  # (B, W, L + W) bool
        past_kv: torch.Tensor,  # (N, 2, B, Hkv, L, D)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A static window: logits (B, W, V), new_kv (N, 2, B, Hkv, W, D), new_raw_keys
        (N, B, Hkv, W, D)."""
        ...

    def vision(
        self, image: torch.Tensor, camera_index: torch.Tensor, frame_index: torch.Tensor
    ) -> torch.Tensor:
        """(1, 3, H, W), (1,), (1,) → (1, G, Hd)."""
        ...


class TorchGraphExecutor:
    """The export graphs' own forwards in eager torch: tests the bookkeeping without ONNX,
    and is the reference the ONNX graphs are compared with."""

    def __init__(
        self, model: PlannerModel, windows: tuple[int, ...], max_len: int, dynamic: bool = False
    ) -> None:
        self.windows, self.max_len, self.dynamic = tuple(sorted(windows)), max_len, dynamic
        self.decoder_step = DecoderStep(model.decoder).eval()
        self.cached_step = CachedDecoderStep(model.decoder).eval()
        self.vision_frame = VisionFrame(model.visual).eval()

    @torch.no_grad()
    def step(self, inputs_embeds, positions, attention_mask, past_kv):
        return self.decoder_step(inputs_embeds, positions, attention_mask, past_kv)

    @torch.no_grad()
    def step_cached(self, inputs_embeds, positions, attention_mask, past, logit_rows):
        inputs_embeds = torch.as_tensor(inputs_embeds)  # StepBackend hands numpy embeddings
        past = tuple(torch.as_tensor(t) for t in past)  # numpy views: shared, not copied
        rows = torch.as_tensor(logit_rows)
        return self.cached_step(inputs_embeds, positions, attention_mask, past, rows)

    @torch.no_grad()
    def vision(self, image, camera_index, frame_index):
        return self.vision_frame(image, camera_index, frame_index)


class StepBackend:
    """`Backend` over a `StepExecutor`; embeddings are looked up in the torch model."""

    def __init__(self, name: str, model: PlannerModel, executor: StepExecutor) -> None:
        self.name = name
        self.model = model
        self.executor = executor
        # the streaming prefill runs forwards of any window against any past and reads the
        # pre-RoPE keys back: the dynamic graph does both, padded static windows do not
        self.streams = bool(executor.dynamic)
        # the dynamic graph's logits are a new numpy array per call: the engine may write
        # into them (DecodeContext.restrict) instead of copying
        self.fresh_logits = bool(executor.dynamic)
        self.dtype = model.decoder.lm_head.weight.dtype
        c = model.config.decoder
        self.scratch = KVCache.for_model(c, executor.max_len, 1, self.dtype)
        self._views_key: tuple | None = None
        self._views: tuple[np.ndarray, ...] = ()
        self._np_key: torch.Tensor | None = None
        self._np: tuple[np.ndarray, np.ndarray] = ()
        self._embed_weight = model.decoder.model.embed_tokens.weight
        self._table_key: tuple[int, int] | None = None
        self._table = np.zeros((0, 0), dtype=np.float32)

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.model.decoder_config

    def flow_velocity(self):
        """The flow head's exported velocity graph as the engine's `Velocity` (the prefix
        K/V padded to the graph's L slots, the padding masked), or None when the executor
        has none (the planner then runs the torch head)."""
        flow = getattr(self.executor, "flow", None)
        if flow is None or not getattr(self.executor, "flow_sessions", None):
            return None
        L = self.executor.max_len
        dtype = self.dtype

        def velocity(x, tau, keys, values):
            R, B, H, n, D = keys.shape
            padded_k = keys.new_zeros(R, B, H, L, D)
            padded_v = values.new_zeros(R, B, H, L, D)
            padded_k[..., :n, :] = keys
            padded_v[..., :n, :] = values
            mask = torch.zeros(B, L, dtype=torch.bool)
            mask[:, :n] = True
            return flow(x, tau, padded_k, padded_v, mask).to(dtype)

        return velocity

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed(input_ids)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Per frame through the vision graph: image i is camera i // T, frame i % T."""
        T = self.model.config.num_frames
        out = []
        for i in range(images.shape[0]):
            cam, frame = torch.tensor([i // T]), torch.tensor([i % T])
            out.append(self.executor.vision(images[i : i + 1].float(), cam, frame))
        return torch.cat(out).to(self.dtype)  # (K*T, G, Hd)

    @torch.no_grad()
    def __call__(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        num_logits: int | None = None,
        logit_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{self.name}: pass exactly one of input_ids, inputs_embeds")
        if inputs_embeds is None and self.executor.dynamic:
            x = self._embed_rows(input_ids)  # (B, S, Hd) float32 numpy: what the graph reads
        else:
            x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # (B, S, Hd)
        B, S, _ = x.shape
        if cache is None:  # a cache-less forward (full diffusion) runs against a scratch one
            cache = self.scratch
            cache.reset()
        if cache.max_len != self.executor.max_len:
            raise ValueError(
                f"{self.name}: KVCache.max_len={cache.max_len}, the graphs were exported with "
                f"max_len={self.executor.max_len}"
            )
        past = cache.length
        if positions is None:
            positions = torch.arange(past, past + S)
        positions = positions.expand(B, S)  # (B, S)
        if mask is None:
            mask = causal_mask(S, past)
        mask = mask.expand(B, S, past + S)  # (B, S, past + S)
        cache.write_positions(positions)
        if self.executor.dynamic:
            if logit_rows is None:
                start = 0 if num_logits is None else S - num_logits
                rows = np.arange(start, S)
            else:
                rows = logit_rows.numpy().astype(np.int64, copy=False)
            return self.run_whole(x, positions, mask, cache, past, rows)  # (B, R, V)
        logits = []
        c0 = 0
        for c1 in self.chunk_ends(mask, past):
            logits.append(self.run_chunk(x, positions, mask, cache, past, c0, c1))
            c0 = c1
        out = torch.cat(logits, dim=1).to(self.dtype)  # (B, S, V)
        if logit_rows is not None:  # the static graphs compute every row's logits
            return out[:, logit_rows]
        return out if num_logits is None else out[:, S - num_logits :]

    def chunk_ends(self, mask: torch.Tensor, past: int) -> list[int]:
        """Chunk ends c1: at most max(W) tokens, and no row attends beyond its chunk."""
        S = mask.shape[1]
        cols = torch.arange(mask.shape[2])
        reach = torch.where(mask, cols, -1).amax(dim=(0, 2)) - past  # (S,) furthest key seen
        widest = self.executor.windows[-1]
        ends, c0 = [], 0
        while c0 < S:
            c1 = min(S, c0 + widest)
            while c1 > c0 and int(reach[c0:c1].max()) >= c1:
                c1 -= 1
            if c1 == c0:
                raise ValueError(
                    f"{self.name}: token {c0} of a {S}-token forward attends beyond the widest "
                    f"exported window ({widest}); export a larger --windows size"
                )
            ends.append(c1)
            c0 = c1
        return ends

    def _embed_rows(self, input_ids: torch.Tensor) -> np.ndarray:
        """Token embeddings (B, S, Hd) as float32 numpy, gathered from a numpy view of the
        embedding table (a float32 copy for other dtypes, remade when the weights change):
        the values `embed(...).float()` gives, without a torch op per forward."""
        weight = self._embed_weight
        key = (weight.data_ptr(), weight._version)
        if self._table_key != key:
            self._table = weight.detach().float().numpy()
            self._table_key = key
        return self._table[input_ids.numpy()]

    def run_whole(self, x, positions, mask, cache: KVCache, past: int, rows: np.ndarray):
        """One call of the dynamic graph for all S new tokens against the `past` cached
        slots; returns the logits (B, R, V) of window rows `rows`. x (B, S, Hd): a tensor or
        a float32 numpy array."""
        B, S = x.shape[0], x.shape[1]
        limit = getattr(self.executor, "rope_rows", 0)
        pos = positions.numpy()
        if limit and (int(pos.min()) < 0 or int(pos.max()) >= limit):
            raise ValueError(
                f"{self.name}: positions {int(pos.min())}..{int(pos.max())} outside "
                f"the dynamic graph's RoPE table [0, {limit}); re-export with a larger max_len"
            )
        if isinstance(x, torch.Tensor) and x.dtype != torch.float32:
            x = x.float()
        logits, new_kv, new_raw = self.executor.step_cached(
            x,
            positions,
            mask,
            self.cache_views(cache, B, past),
            rows,
        )
        N, _, _, Hkv, _, D = cache.kv.shape
        # (B, 2N·Hkv, S, D) / (B, N·Hkv, S, D) into the cache's (N, 2, B, Hkv, S, D) /
        # (N, B, Hkv, S, D) slots: numpy copies into the cache's memory
        new_kv = np.asarray(new_kv).reshape(B, N, 2, Hkv, S, D).transpose(1, 2, 0, 3, 4, 5)
        new_raw = np.asarray(new_raw).reshape(B, N, Hkv, S, D).transpose(1, 0, 2, 3, 4)
        if cache.kv.dtype == torch.float32:
            kv, raw = self._cache_np(cache)
            kv[:, :, :B, :, past : past + S] = new_kv
            raw[:, :B, :, past : past + S] = new_raw
        else:
            cache.kv[:, :, :B, :, past : past + S] = torch.from_numpy(new_kv.copy())
            cache.raw_keys[:, :B, :, past : past + S] = torch.from_numpy(new_raw.copy())
        logits = torch.from_numpy(logits) if isinstance(logits, np.ndarray) else logits
        return logits if logits.dtype == self.dtype else logits.to(self.dtype)

    def _cache_np(self, cache: KVCache) -> tuple[np.ndarray, np.ndarray]:
        """numpy views of the cache's kv and raw_keys buffers (made once per cache)."""
        if self._np_key is not cache.kv:
            self._np = (cache.kv.numpy(), cache.raw_keys.numpy())
            self._np_key = cache.kv
        return self._np

    def cache_views(self, cache: KVCache, batch: int, past: int) -> tuple[np.ndarray, ...]:
        """Layer by layer the keys and values of rows [0, batch), (B, Hkv, M, D) each: numpy
        views of the cache's memory, never copies. Where the first `past` slots are
        contiguous on their own (one row, one KV head) the views stop there; otherwise they
        span every slot (the graph masks the slots past `past`), since a strided slice would
        be copied. A cache of another dtype is converted per call."""
        if cache.kv.dtype != torch.float32:
            kv = cache.kv[:, :, :batch, :, :past].float().numpy()
            return tuple(kv[i, j] for i in range(kv.shape[0]) for j in (0, 1))
        key = (id(cache), cache.kv.data_ptr(), batch)
        if self._views_key != key:
            kv = cache.kv.numpy()  # shares the tensor's memory
            self._views = tuple(kv[i, j, :batch] for i in range(kv.shape[0]) for j in (0, 1))
            self._views_key = key
        views = self._views
        if views[0].shape[0] * views[0].shape[1] == 1:  # (1, 1, M, D): a prefix is contiguous
            return tuple(v[:, :, :past] for v in views)
        return views

    def run_chunk(self, x, positions, mask, cache: KVCache, past: int, c0: int, c1: int):
        """One graph call for new tokens [c0, c1); returns their logits (B, n, V)."""
        B, n = x.shape[0], c1 - c0
        L = self.executor.max_len
        W = self.executor.windows[bisect.bisect_left(self.executor.windows, n)]
        seen = past + c0  # cache slots visible to the chunk
        embeds = x.new_zeros(B, W, x.shape[2], dtype=torch.float32)  # (B, W, Hd)
        embeds[:, :n] = x[:, c0:c1]
        pos = torch.zeros(B, W, dtype=torch.long)  # (B, W)
        pos[:, :n] = positions[:, c0:c1]
        graph_mask = torch.zeros(B, W, L + W, dtype=torch.bool)  # (B, W, L + W)
        graph_mask[:, :n, :seen] = mask[:, c0:c1, :seen]
        graph_mask[:, :n, L : L + n] = mask[:, c0:c1, seen : seen + n]
        pad = torch.arange(n, W)
        graph_mask[:, pad, L + pad] = True  # pad rows see themselves only
        past_kv = cache.kv[:, :, :B].float()  # (N, 2, B, Hkv, L, D)
        logits, new_kv, new_raw = self.executor.step(embeds, pos, graph_mask, past_kv)
        cache.kv[:, :, :B, :, seen : seen + n] = new_kv[:, :, :, :, :n]
        cache.raw_keys[:, :B, :, seen : seen + n] = new_raw[:, :, :, :n]
        return logits[:, :n]  # (B, n, V)
