"""Eager against static-shape / CUDA-graph decode (`blockplan bench --compare-graphs`).

One model, one set of inputs, two planners: the torch backend as it is (`eager`) and the
same weights through `GraphBackend` (`graphs`: replayed CUDA graphs on a GPU; on a CPU the
static path without capture, which is what a dry run of scripts/gpu_bench.sh measures). Per
round every strategy runs on both back to back (order alternating by round), so load drift
hits them alike. On top of the per-plan summaries:

* `forward_ms_by_width`: one forward of w new tokens after a prefilled prompt, B = 1, per
  window width w (1 and every bucket width that fits), the median of `reps` timed calls
  (each synchronised on a GPU). The AR strategy's forwards are mostly w = 1, the draft and
  verify forwards of scaffold spec w = the block.
* `bandwidth_floor`: what one forward must at least cost when every weight byte and every
  attended K/V byte is read once from memory at a stated bandwidth (`--bandwidth-gbs`; no
  number is guessed for the device), and each measured forward's ratio to it.
* `scaffold_spec_projection`: random weights draft badly, so the plan a trained model would
  take at a given tokens-per-step rate (the paper's 4.9): prefill + editable / rate draft and
  verify forwards at the block's width. An estimate from measured parts, labelled as one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from blockplan.backends.graphs import (
    CudaGraphRunner,
    DirectRunner,
    GraphBackend,
    bucket_batches,
    bucket_widths,
)
from blockplan.bench.decoding import (
    Progress,
    Run,
    model_summary,
    stage_medians,
    strategy_runner,
    summarize,
)
from blockplan.decoding.device import synchronize
from blockplan.decoding.strategies import rollout_section
from blockplan.model.masks import causal_mask
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_input

PAPER_TOKENS_PER_STEP = 4.9  # Fast-dDrive's scaffold spec, trained weights (docs/BENCHMARKS.md)


def _planner(base: Planner, num_rollouts: int, backend=None) -> Planner:
    config = base.config.with_params({"rollouts.num_rollouts": num_rollouts})
    return base.sibling(config, backend)


def decoder_weight_bytes(model) -> int:
    """Bytes of decoder weights one forward reads: every parameter once (a tied LM head
    shares the embedding table), except an untied embedding table (a forward reads rows)."""
    decoder = model.decoder
    tied = decoder.lm_head.weight is decoder.model.embed_tokens.weight
    total = 0
    for name, p in decoder.named_parameters():  # shared tensors appear once
        if name.startswith("model.embed_tokens") and not tied:
            continue
        total += p.numel() * p.element_size()
    return total


def kv_bytes_per_slot(planner: Planner) -> int:
    c = planner.model.config.decoder
    return (
        c.num_hidden_layers
        * 2
        * c.num_key_value_heads
        * c.dim_per_head
        * planner.cache.kv.element_size()
    )


@torch.no_grad()
def forward_ms_by_width(
    planner: Planner, widths: Sequence[int], reps: int, past: int
) -> dict[str, float]:
    """Median ms of one B = 1 forward of w new tokens after `past` prefilled slots."""
    runner, cache, device = planner.runner, planner.cache, planner.device
    c = planner.model.config.decoder
    cache.reset()
    prompt = torch.zeros(1, past, c.hidden_size, dtype=planner.dtype, device=device)
    runner(inputs_embeds=prompt, mask=causal_mask(past), cache=cache, num_logits=1)
    cache.commit(past)
    out = {}
    for w in widths:
        ids = torch.full((1, w), 3, dtype=torch.long)
        kwargs = {"positions": torch.arange(past, past + w), "mask": causal_mask(w, past)}
        times = []
        for _ in range(reps + 1):  # the first call is untimed
            synchronize(device)
            t0 = time.perf_counter()
            runner(ids, cache=cache, **kwargs)
            synchronize(device)
            times.append((time.perf_counter() - t0) * 1e3)
        out[str(w)] = round(float(np.median(times[1:])), 4)
    cache.reset()
    return out


def run_graph_bench(
    planner: Planner,
    strategies: Sequence[str],
    num_rollouts: int,
    iters: int,
    warmup: int = 1,
    seed: int = 0,
    reps: int = 10,
    bandwidth_gbs: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    if planner.runner.name != "torch":
        raise ValueError(f"--compare-graphs: the torch backend only, not {planner.runner.name}")
    device = planner.device
    capture = device.type == "cuda"

    def graph_backend() -> GraphBackend:
        runner = CudaGraphRunner(device) if capture else DirectRunner()
        return GraphBackend(planner.model, runner)

    backend = graph_backend()
    planners = {
        "eager": _planner(planner, num_rollouts),
        "graphs": _planner(planner, num_rollouts, backend),
    }
    names = list(strategies)
    runners = {(v, s): strategy_runner(p, s) for v, p in planners.items() for s in names}
    if "rollouts" in names:  # N = 1 beside N, on both
        runners[("eager", "rollouts_n1")] = strategy_runner(_planner(planner, 1), "rollouts")
        n1 = _planner(planner, 1, backend)
        runners[("graphs", "rollouts_n1")] = strategy_runner(n1, "rollouts")
    inputs = [
        synthetic_input(planner.config, seed + i, planner.schema) for i in range(warmup + iters)
    ]
    reference = planners["eager"]
    # One forward per width first: the floor ratio is the cheapest number and the one a
    # short GPU loan must not lose to the plan rounds running out of time.
    P = reference.prompt_len
    room = reference.cache.max_len - P
    widths = [1, *(w for w in bucket_widths(reference.cache.max_len, backend.windows) if w <= room)]
    say(f"bench graphs: one forward per width {widths} after {P} prompt slots, {reps} reps")
    by_width = {v: forward_ms_by_width(p, widths, reps, P) for v, p in planners.items()}
    runs: dict[tuple[str, str], list[Run]] = {key: [] for key in runners}
    timed_from = None
    rounds_done = 0
    try:
        for i, obs in enumerate(inputs):
            tag = " (warm-up)" if i < warmup else ""
            say(f"bench graphs: round {i + 1}/{len(inputs)}{tag}")
            if i == warmup:
                timed_from = backend.stats.as_dict()  # the timed rounds' counts, below
            order = ("eager", "graphs") if i % 2 == 0 else ("graphs", "eager")
            for strategy in [*names, "rollouts_n1"]:
                for variant in order:
                    if (variant, strategy) in runners:
                        run = runners[(variant, strategy)](obs)
                        if i >= warmup:
                            runs[(variant, strategy)].append(run)
            rounds_done = i + 1 - warmup
    except KeyboardInterrupt:  # a time limit: report the rounds that finished, and say so
        rounds_done = max(rounds_done, 0)
        say(f"bench graphs: interrupted after {rounds_done} timed round(s)")
        for key in runs:
            del runs[key][rounds_done:]
    timed = names if rounds_done else []  # the strategies with a plan to summarise
    stats_total = backend.stats.as_dict()
    A = len(reference.scaffold)
    trajectory = rollout_section(reference.scaffold)
    report: dict[str, Any] = {
        "model": model_summary(reference, iters, warmup),
        "graphs": {
            "capture": capture,
            "runner": type(backend.runner).__name__,
            "buckets": {
                "batch": list(bucket_batches(planners["graphs"].cache.max_batch)),
                "windows": list(bucket_widths(planners["graphs"].cache.max_len, backend.windows)),
            },
            "forwards_timed_rounds": _difference(stats_total, timed_from or stats_total),
            "graphs_captured": stats_total["graphs_captured"],
            "capture_failures": list(getattr(backend.runner, "failures", [])),
        },
        "variants": {},
        "graphs_latency_ratio_vs_eager": {},
        "graphs_identical_tokens_fraction": {},
        "timed_rounds": rounds_done,
        "interrupted": rounds_done < iters,
    }
    for variant in planners:
        per = {}
        for strategy in timed:
            n = num_rollouts if strategy == "rollouts" else 1
            tokens = A + (n - 1) * (trajectory.end - trajectory.start)
            per[strategy] = summarize(runs[(variant, strategy)], float(tokens))
        report["variants"][variant] = per
    report["stage_ms_p50"] = {
        variant: {s: stage_medians(runs[(variant, s)]) for s in timed} for variant in planners
    }
    for strategy in timed:
        eager = report["variants"]["eager"][strategy]["latency_ms"]["p50"]
        ours = report["variants"]["graphs"][strategy]["latency_ms"]["p50"]
        report["graphs_latency_ratio_vs_eager"][strategy] = round(ours / eager, 3)
        pairs = zip(runs[("eager", strategy)], runs[("graphs", strategy)], strict=True)
        same = [
            a.tokens is not None and b.tokens is not None and np.array_equal(a.tokens, b.tokens)
            for a, b in pairs
        ]
        report["graphs_identical_tokens_fraction"][strategy] = float(np.mean(same))
    if "rollouts" in timed:
        report["rollouts_latency_ratio_vs_n1"] = {
            variant: round(
                report["variants"][variant]["rollouts"]["latency_ms"]["p50"]
                / summarize(runs[(variant, "rollouts_n1")], float(A))["latency_ms"]["p50"],
                3,
            )
            for variant in planners
        }
    report["forward_ms_by_width"] = {"past_slots": P, "batch": 1, **by_width}
    report["bandwidth_floor"] = bandwidth_floor(reference, widths, P, by_width, bandwidth_gbs)
    if "scaffold_spec" in timed:
        report["scaffold_spec_projection"] = spec_projection(reference, report, by_width, widths)
    return report


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    eager = {k: v - before["eager_forwards"].get(k, 0) for k, v in after["eager_forwards"].items()}
    widths = {
        k: v - before["static_forwards_by_window"].get(k, 0)
        for k, v in after["static_forwards_by_window"].items()
    }
    return {
        "static_forwards": after["static_forwards"] - before["static_forwards"],
        "eager_forwards": {k: v for k, v in eager.items() if v},
        "static_forwards_by_window": {k: v for k, v in widths.items() if v},
    }


def bandwidth_floor(
    planner: Planner,
    widths: Sequence[int],
    past: int,
    by_width: dict[str, dict[str, float]],
    bandwidth_gbs: float | None,
) -> dict[str, Any]:
    weights = decoder_weight_bytes(planner.model)
    per_slot = kv_bytes_per_slot(planner)
    out: dict[str, Any] = {
        "decoder_weight_bytes": weights,
        "kv_bytes_per_slot": per_slot,
        "bandwidth_gb_per_s": bandwidth_gbs,
        "bandwidth_source": "stated (--bandwidth-gbs)" if bandwidth_gbs else None,
    }
    if not bandwidth_gbs:
        out["note"] = "no --bandwidth-gbs: no floor computed"
        return out
    floor = {
        str(w): round((weights + per_slot * (past + w)) / (bandwidth_gbs * 1e9) * 1e3, 6)
        for w in widths
    }
    out["floor_ms"] = floor
    out["ratio_to_floor"] = {
        variant: {w: round(ms / floor[w], 2) for w, ms in times.items()}
        for variant, times in by_width.items()
    }
    return out


def spec_projection(
    planner: Planner,
    report: dict[str, Any],
    by_width: dict[str, dict[str, float]],
    widths: Sequence[int],
) -> dict[str, Any]:
    """The plan scaffold spec would take at the paper's tokens per step (an estimate)."""
    editable = int(planner.scaffold.is_editable.sum())
    block = planner.model.config.block_size
    width = next((w for w in widths if w >= block), widths[-1])
    steps = math.ceil(editable / PAPER_TOKENS_PER_STEP)
    out: dict[str, Any] = {
        "estimate": True,
        "tokens_per_step": PAPER_TOKENS_PER_STEP,
        "editable_tokens": editable,
        "steps": steps,
        "forward_width": width,
    }
    for variant, times in by_width.items():
        prefill = report["stage_ms_p50"][variant]["scaffold_spec"].get("prefill", 0.0)
        decode = 2 * steps * times[str(width)]  # a draft and a verify forward per step
        out[variant] = {
            "prefill_ms": prefill,
            "forward_ms": times[str(width)],
            "plan_ms": round(prefill + decode, 3),
        }
    return out
