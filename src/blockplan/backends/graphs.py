"""Static-shape decode for the torch backend, replayed as CUDA graphs (`model.cuda_graphs`).

At batch 1 a decoder step of a large model on a GPU is launch-bound: hundreds of small
kernels, each waiting on the Python that launches it. A CUDA graph records the launches of
one forward once and replays them with one call, which needs every tensor the forward
touches at a fixed address and a fixed shape. So each forward the engine asks for runs in a
*bucket* (batch B, window W):

* W is the smallest ONNX export window (`export.onnx_export.DEFAULT_WINDOWS`, the buckets the
  static ONNX / TensorRT graphs use) holding the S new tokens; B is 1 (before the rollouts
  fork) or the cache's `max_batch` (after it), as in the export.
* inputs live in per-bucket static tensors: the embeddings (B, W, Hd), the positions
  (B, W), the attention mask (B, W, L') over every slot of the preallocated `KVCache`
  (L' = max_len + its spare slot), and the write slots (W,): token i goes to cache slot
  `length + i`. The cache length thus enters as a tensor (the write slots and the mask's
  columns), never as a shape.
* pad rows (i >= S) write their K/V to the cache's spare slot (`KVCache(spare_slots=1)`,
  beyond `max_len`: no engine forward ever reads it) and attend to that slot only, so every
  softmax row has a finite entry; no real row attends to it. Their logits are dropped.
* attention reads all L' slots under the mask, so nothing about the shape depends on how
  full the cache is.

`StaticStep.compute` is that whole forward on the bucket's tensors. The runner decides what
happens with it: `DirectRunner` calls it every time (the CPU: the static path tested without
a GPU, tokens equal to eager), `CudaGraphRunner` captures it once per bucket — at the first
forward that meets a cache, every bucket of that cache, with all rows pad so the capture
writes the spare slot only — and then replays it.

Anything else runs eagerly and is counted by reason (`GraphStats.eager`): no cache (the
full-diffusion forward), a forward wider than the widest window (the prefill of a long
prompt), a batch other than 1 or `max_batch`, multimodal-RoPE positions (a Qwen2.5-VL
prompt), a cache without a spare slot, or autograd on.
"""

from __future__ import annotations

import bisect
import logging
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from blockplan.backends.base import TorchBackend
from blockplan.decoding.kv_cache import KVCache
from blockplan.export.onnx_export import DEFAULT_WINDOWS
from blockplan.model.layers import rope_cos_sin
from blockplan.model.masks import causal_mask

log = logging.getLogger("blockplan.graphs")

# What the static path needs of a KVCache: one slot beyond max_len for the pad rows.
SPARE_SLOTS = 1


def bucket_widths(max_len: int, windows: Sequence[int] = DEFAULT_WINDOWS) -> tuple[int, ...]:
    """The window buckets worth having for a cache of `max_len` slots: the export's windows
    up to the first one that holds `max_len` tokens (a wider one is never the smallest fit)."""
    out = []
    for w in sorted(set(int(w) for w in windows)):
        out.append(w)
        if w >= max_len:
            break
    return tuple(out)


def bucket_batches(max_batch: int) -> tuple[int, ...]:
    """1 before the rollouts fork, `max_batch` after it (the export's batch sizes)."""
    return (1,) if max_batch == 1 else (1, max_batch)


@dataclass
class GraphStats:
    """Forwards since the last reset: `static` ran in a bucket (replayed where captured),
    `eager` ran the module forward, by reason; `captured` graphs recorded so far."""

    static: int = 0
    captured: int = 0
    eager: Counter = field(default_factory=Counter)
    by_width: Counter = field(default_factory=Counter)  # static forwards per bucket width

    def as_dict(self) -> dict[str, Any]:
        return {
            "static_forwards": self.static,
            "eager_forwards": dict(sorted(self.eager.items())),
            "static_forwards_by_window": {str(w): n for w, n in sorted(self.by_width.items())},
            "graphs_captured": self.captured,
        }


class StaticStore:
    """The decoder layers' `KVStore` for one bucket: writes the W new tokens' K/V at the
    bucket's write slots (a tensor) and hands attention every slot of the cache."""

    def __init__(self, cache: KVCache, batch: int, slots: torch.Tensor) -> None:
        self.slots = slots  # (W,) long, on the cache's device
        self.views = [
            (cache.raw_keys[i, :batch], cache.kv[i, 0, :batch], cache.kv[i, 1, :batch])
            for i in range(cache.kv.shape[0])
        ]  # per layer (B, Hkv, L', D) each, fixed addresses

    def write_positions(self, positions: torch.Tensor) -> None:  # the runner records them
        return None

    def write(self, layer, k_raw, k, v):
        raw_all, k_all, v_all = self.views[layer]
        raw_all.index_copy_(2, self.slots, k_raw)
        k_all.index_copy_(2, self.slots, k)
        v_all.index_copy_(2, self.slots, v)
        return k_all, v_all  # (B, Hkv, L', D): the mask says which slots a row sees


class StaticStep:
    """One bucket (B, W) of one cache: its static input tensors and its forward."""

    def __init__(self, decoder, cache: KVCache, batch: int, width: int) -> None:
        c = decoder.config
        device, dtype = cache.kv.device, cache.kv.dtype
        self.decoder, self.batch, self.width = decoder, batch, width
        self.num_slots = cache.kv.shape[4]  # L' = max_len + spare
        self.spare = cache.max_len  # the first spare slot: where pad rows write
        self.embeds = torch.zeros(batch, width, c.hidden_size, dtype=dtype, device=device)
        self.positions = torch.zeros(batch, width, dtype=torch.long, device=device)
        self.mask = torch.zeros(batch, width, self.num_slots, dtype=torch.bool, device=device)
        self.slots = torch.full((width,), self.spare, dtype=torch.long, device=device)
        self.mask[:, :, self.spare] = True  # all pad until loaded: touches the spare slot only
        self.store = StaticStore(cache, batch, self.slots)
        self.graph: Any = None  # torch.cuda.CUDAGraph once captured (False: capture failed)
        self.output: torch.Tensor | None = None  # the captured forward's logits

    def load(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, past: int) -> None:
        """Copy a forward's S <= W new tokens in: embeddings x (B, S, Hd), positions (B, S),
        mask (B|1, S, past + S) over the committed slots and the new ones."""
        S = x.shape[1]
        B, W, L = self.batch, self.width, self.num_slots
        full = torch.zeros(B, W, L, dtype=torch.bool)  # built on the host, copied once
        full[:, :S, : past + S] = mask.expand(B, S, past + S)
        full[:, S:, self.spare] = True
        slots = torch.full((W,), self.spare, dtype=torch.long)
        slots[:S] = torch.arange(past, past + S)
        self.embeds[:, :S].copy_(x)
        self.positions[:, :S].copy_(positions)
        self.mask.copy_(full)
        self.slots.copy_(slots)

    @torch.no_grad()
    def compute(self) -> torch.Tensor:
        """The decoder forward on the static tensors: logits (B, W, V). It writes the new
        K/V at `slots` and reads every cache slot under `mask`; it never syncs the host."""
        d = self.decoder
        c = d.config
        x = self.embeds
        bias = x.new_zeros(self.mask.shape).masked_fill(~self.mask, -torch.inf)[:, None]
        rope = rope_cos_sin(self.positions, c.dim_per_head, c.rope_theta, x.dtype)
        for layer in d.model.layers:
            x = layer(x, rope, bias, self.store)  # (B, W, Hd)
        return d.lm_head(d.model.norm(x))  # (B, W, V)


class DirectRunner:
    """Runs a bucket's forward as it is, every time: the static path without capture (what
    the CPU tests run; on a GPU it isolates the graphs' effect from the padding's)."""

    capture = False

    def prepare(self, step: StaticStep) -> bool:
        return False

    def run(self, step: StaticStep) -> torch.Tensor:
        return step.compute()


class CudaGraphRunner:
    """Captures a bucket's forward into a `torch.cuda.CUDAGraph` once, then replays it. All
    graphs share one memory pool (they never run at the same time); captured widest first.

    A capture that fails (an op the driver cannot record) leaves that bucket on the static
    path without a graph — the same tokens, only slower — logged and counted in
    `failures` (the bench reports them), rather than failing the planner."""

    capture = True

    def __init__(self, device: torch.device, warmup_runs: int = 2) -> None:
        self.device = device
        self.warmup_runs = warmup_runs
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)
        self.failures: list[str] = []

    def prepare(self, step: StaticStep) -> bool:
        """Capture `step` (its current inputs are all pad: only the spare slot is written);
        True when a graph was recorded now."""
        if step.graph is not None:
            return False
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):  # kernel selection and workspaces, off-graph
            for _ in range(self.warmup_runs):
                step.compute()
        current.wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                output = step.compute()
        except RuntimeError as e:
            step.graph = False  # not capturable: run it directly from now on
            message = f"bucket (B={step.batch}, W={step.width}): {type(e).__name__}: {e}"
            self.failures.append(message[:500])
            log.warning("CUDA graph capture failed, running without a graph: %s", message)
            return False
        step.graph, step.output = graph, output
        return True

    def run(self, step: StaticStep) -> torch.Tensor:
        self.prepare(step)
        if step.graph is False:
            return step.compute()
        step.graph.replay()
        return step.output


class GraphBackend(TorchBackend):
    """The torch backend with bucketed static-shape forwards (replayed CUDA graphs with a
    `CudaGraphRunner`, plain calls with a `DirectRunner`) and eager fallback; see above.
    Same name as the torch backend: to the engine it is the torch backend."""

    spare_slots = SPARE_SLOTS

    def __init__(
        self,
        model,
        runner: DirectRunner | CudaGraphRunner | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
    ) -> None:
        super().__init__(model)
        if runner is None:
            runner = CudaGraphRunner(self.device) if self.device.type == "cuda" else DirectRunner()
        self.runner = runner
        self.windows = tuple(sorted(set(int(w) for w in windows)))
        self.stats = GraphStats()
        # per cache (weakly: a planner's cache lives as long as the planner): its buckets
        self.steps: weakref.WeakKeyDictionary[KVCache, dict[tuple[int, int], StaticStep]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def decoder(self):
        return self.model.decoder

    def report(self) -> dict[str, Any]:
        """The counts (`GraphStats.as_dict`), whether graphs are captured, failed captures."""
        failures = list(getattr(self.runner, "failures", []))
        return {
            **self.stats.as_dict(),
            "capture": self.runner.capture,
            "capture_failures": failures,
        }

    def buckets(self, cache: KVCache) -> dict[tuple[int, int], StaticStep]:
        """Every bucket of `cache`, made (and, with capture, recorded) on first use."""
        steps = self.steps.get(cache)
        if steps is None:
            steps = {}
            widths = bucket_widths(cache.max_len, self.windows)
            for batch in bucket_batches(cache.max_batch):
                for width in sorted(widths, reverse=True):  # widest first: the pool grows once
                    step = StaticStep(self.decoder, cache, batch, width)
                    self.stats.captured += int(self.runner.prepare(step))
                    steps[(batch, width)] = step
            self.steps[cache] = steps
        return steps

    def prepare(self, cache: KVCache) -> None:
        """Make (capture) `cache`'s buckets now rather than at its first forward."""
        if cache.spare_slots >= SPARE_SLOTS:
            self.buckets(cache)

    def eager_reason(self, x_shape, positions, cache) -> str | None:
        """Why a forward cannot run in a bucket (None: it can)."""
        if cache is None:
            return "no_cache"
        if cache.spare_slots < SPARE_SLOTS:
            return "no_spare_slot"
        if torch.is_grad_enabled():
            return "autograd"
        if positions is not None and positions.dim() == 3:
            return "mrope_positions"
        B, S = x_shape
        if self.windows[-1] < S:
            return "wider_than_buckets"
        if B not in bucket_batches(cache.max_batch):
            return "batch_not_bucketed"
        return None

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        num_logits: int | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("GraphBackend: pass exactly one of input_ids, inputs_embeds")
        given = input_ids if input_ids is not None else inputs_embeds
        reason = self.eager_reason(tuple(given.shape[:2]), positions, cache)
        if reason is not None:
            self.stats.eager[reason] += 1
            passed = {"inputs_embeds": inputs_embeds, "positions": positions, "mask": mask}
            passed |= {"cache": cache, "num_logits": num_logits}
            passed = {k: v for k, v in passed.items() if v is not None} | kwargs
            return super().__call__(input_ids, **passed)
        logit_rows = kwargs.pop("logit_rows", None)
        if kwargs:
            raise TypeError(f"GraphBackend: unexpected arguments {sorted(kwargs)}")
        if input_ids is not None:
            x = self.model.embed(input_ids.to(self.device))  # (B, S, Hd)
        else:
            x = inputs_embeds.to(self.device)
        B, S, _ = x.shape
        past = cache.length
        if positions is None:
            positions = torch.arange(past, past + S)
        positions = positions.expand(B, S)  # (S,) or (B|1, S) -> (B, S)
        if mask is None:
            mask = causal_mask(S, past)
        mask = mask.cpu()
        mask = mask[None] if mask.dim() == 2 else mask  # (B|1, S, past + S)
        if tuple(mask.shape[1:]) != (S, past + S):
            raise ValueError(
                f"GraphBackend: mask {tuple(mask.shape)} for {S} new tokens after {past} cached"
            )
        cache.write_positions(positions)  # checks the length and batch, records positions
        width = self.windows[bisect.bisect_left(self.windows, S)]
        step = self.buckets(cache)[(B, width)]
        step.load(x, positions.to(self.device), mask, past)
        logits = self.runner.run(step)  # (B, W, V), static: copied out below
        self.stats.static += 1
        self.stats.by_width[width] += 1
        rows = logits[:, :S]
        if num_logits is not None:
            rows = rows[:, S - num_logits :]
        if logit_rows is not None:
            rows = rows[:, logit_rows.to(rows.device)]
        return rows.clone()  # (B, S', V): the next forward overwrites the static output
