"""`bench --streaming`: streamed vs fully recomputed encode + prefill over a frame stream.

Two planners share one model: one streams (`frame_window.streaming = "on"`: vision cache and
incremental prefill), the other recomputes every tick (`"off"`). Each tick of
`stream_observation` (one new frame per camera) goes through both; reported:

* prefill_cost_ratio: streamed / full encode + prefill wall time, summed over the ticks after
  the first (the first tick is a full prefill for both);
* max_abs_logit_diff: the largest difference of the logits at the first answer slot and of a
  teacher-forced pass over the scaffold's answer slots (which reads every cached K/V);
* breakdown (bench/streaming_cost.py): the prompt's tokens by kind and the ideal ratios from
  token and FLOP counts, which explain the measured one;
* over `plans` ticks, whole plans both ways: token agreement, the ADE between their
  trajectories (the drift of an approximate model; 0 for an exact one) and the plan latency.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from blockplan.bench.stream_sequence import stream_observation
from blockplan.bench.streaming_cost import prefill_breakdown
from blockplan.config import PlannerConfig
from blockplan.decoding.block_loop import DecodeContext
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.strategies import prefill as full_prefill
from blockplan.model.masks import causal_mask
from blockplan.planner.planner import Planner
from blockplan.types import Observation


def with_streaming(config: PlannerConfig, mode: str) -> PlannerConfig:
    return config.with_params({"frame_window.streaming": mode})


def twin_planners(planner: Planner) -> tuple[Planner, Planner]:
    """(streaming, full-recompute) planners over `planner`'s model, tokenizer and schema."""
    make = [planner.sibling(with_streaming(planner.config, m)) for m in ("on", "off")]
    return make[0], make[1]


@torch.no_grad()
def prefill_logits(
    planner: Planner, observation: Observation
) -> tuple[torch.Tensor, dict[str, float]]:
    """Encode + prefill one observation the planner's way (streamed when it streams); return
    logits (1 + A, V) — the first answer slot's, then a teacher-forced pass over the scaffold's
    answer tokens — and the wall times in ms of `encode` (images → visual tokens) and
    `prefill` (prompt embeddings and the prompt's K/V)."""
    stage_ms: dict[str, float] = {}
    embeds, _ = planner.embed(observation, stage_ms)  # (1, P, W)
    P, A = embeds.shape[1], len(planner.scaffold)
    cache = KVCache.for_model(planner.model.config.decoder, P + A, 1, planner.dtype, embeds.device)
    # The torch backend: the model on its device (a GPU's too). Other backends: the eager model
    # (on the CPU), since their static-shape graphs have no window of the answer's length.
    model = planner.runner if planner.runner.name == "torch" else planner.model
    ctx = DecodeContext(model, cache, planner.scaffold, P)
    run = planner.streamer.bind(observation.frames) if planner.streamer else full_prefill
    t1 = time.perf_counter()
    state = run(ctx, embeds, planner.prompt_mask)
    prefill_ms = stage_ms["prompt"] + (time.perf_counter() - t1) * 1e3  # embeddings + K/V
    times = {"encode": stage_ms["encode"], "prefill": prefill_ms}
    answer = torch.tensor(np.asarray(planner.scaffold.token_ids), dtype=torch.long)[None]
    logits = model(
        answer, positions=torch.arange(P, P + A), mask=causal_mask(A, P), cache=cache
    )  # (1, A, V)
    return torch.cat([state.next_logits, logits[0]]).float().cpu(), times


def ade(a: np.ndarray, b: np.ndarray) -> float:
    """Mean distance (m) between matching waypoints of two (5, 2) trajectories."""
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1).mean())


def run_streaming_bench(
    planner: Planner,
    ticks: int,
    plans: int,
    strategy: str | None = None,
    image_size: tuple[int, int] = (90, 160),
) -> dict[str, Any]:
    """Run the streamed and the full planner over `ticks` ticks (see the module)."""
    if ticks < 2:
        raise ValueError(f"ticks={ticks}: the bench needs >= 2 (the first is a full prefill)")
    stream, full = twin_planners(planner)
    mc = planner.model.config
    times: dict[str, list[dict[str, float]]] = {"streamed": [], "full": []}
    diffs = []
    for tick in range(ticks):
        obs = stream_observation(planner.config, tick, image_size, schema=planner.schema)
        logits_s, ms_s = prefill_logits(stream, obs)
        logits_f, ms_f = prefill_logits(full, obs)
        diffs.append(float((logits_s - logits_f).abs().max()))
        if tick:  # the steady state: the first tick is a full prefill on both sides
            times["streamed"].append(ms_s)
            times["full"].append(ms_f)

    def total(side: str, stages: tuple[str, ...] = ("encode", "prefill")) -> float:
        return sum(t[s] for t in times[side] for s in stages)

    def median(side: str, stage: str) -> float:
        return float(np.median([t[stage] for t in times[side]]))

    assert stream.streamer is not None and stream.vision_cache is not None  # "on"
    prefill_stats = stream.streamer.stats.as_dict()
    stream.reset_stream()
    same, drift, plan_s, plan_f = 0, [], [], []
    for tick in range(plans):
        obs = stream_observation(planner.config, tick, image_size, schema=planner.schema)
        a, b = stream.decode(obs, strategy), full.decode(obs, strategy)
        same += bool(np.array_equal(a.result.tokens, b.result.tokens))
        drift.append(ade(a.plan.answer.waypoints, b.plan.answer.waypoints))
        plan_s.append(sum(a.plan.timings_ms.values()))
        plan_f.append(sum(b.plan.timings_ms.values()))
    K, T, G = len(mc.camera_names), mc.num_frames, mc.tokens_per_image
    P = stream.prompt_len
    streamed_tokens = K * G + len(stream.streamer.text_positions)
    return {
        "streaming": {
            "prefill_cost_ratio": total("streamed") / total("full"),
            "encode_cost_ratio": total("streamed", ("encode",)) / total("full", ("encode",)),
            "prefill_only_cost_ratio": total("streamed", ("prefill",))
            / total("full", ("prefill",)),
            "max_abs_logit_diff": max(diffs),
            "ticks": ticks,
            "exact": mc.streams_exactly,
            "visual_attention": mc.visual_attention,
            "frame_slot_embedding": mc.frame_slot_embedding,
            "cameras": K,
            "frames": T,
            "tokens_per_image": G,
            "prompt_tokens": P,
            "prefill_tokens_streamed": streamed_tokens,
            "prefill_token_ratio": streamed_tokens / P,
            "image_size": list(image_size),
            "images_encoded_per_tick": {"streamed": K, "full": K * T},
            "median_ms": {
                side: {stage: median(side, stage) for stage in ("encode", "prefill")}
                for side in ("streamed", "full")
            },
            "prefill": prefill_stats,
            "breakdown": prefill_breakdown(stream),
            "plans": plans,
            "strategy": strategy or planner.config.decoding.strategy,
            "plans_identical": same,
            "ade_diff_m": {"mean": float(np.mean(drift)), "max": float(np.max(drift))}
            if plans
            else None,
            "plan_ms_median": {
                "streamed": float(np.median(plan_s)),
                "full": float(np.median(plan_f)),
            }
            if plans
            else None,
        }
    }
