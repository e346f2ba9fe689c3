"""Benchmark the decoding strategies on one model and one set of inputs (`blockplan bench`).

Speed is reported as ratios between strategies measured in one run (the machine is shared
and noisy); nothing here asserts a wall-clock threshold.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from blockplan.config import PlannerConfig
from blockplan.engine.planner import Planner
from blockplan.schema import ScaffoldParseError
from blockplan.types import NS_PER_S, CameraFrame, EgoState, Observation

Progress = Callable[[str], None]


def synthetic_observation(config: PlannerConfig, seed: int, size=(90, 160)) -> Observation:
    """Smooth random camera images (a horizon, a road wedge, noise) and a straight,
    constant-speed ego history: the same inputs for every strategy."""
    rng = np.random.default_rng(seed)
    H, W = size
    rows = np.linspace(0, 1, H)[:, None, None]
    frames = []
    for _ in config.camera_names:
        base = rng.uniform(40, 200, 3)
        for t in range(config.frame_window.num_frames):
            sky = (rows < 0.45) * rng.uniform(120, 230, 3)
            ground = (rows >= 0.45) * base
            noise = rng.normal(0, 12 + 2 * t, (H, W, 3))
            image = np.clip(sky + ground + noise, 0, 255).astype(np.uint8)
            frames.append(image)
    names = [n for n in config.camera_names for _ in range(config.frame_window.num_frames)]
    stamp = 100 * NS_PER_S
    speed = float(rng.uniform(2.0, 15.0))
    ego = tuple(
        EgoState(stamp - int((3.0 - 0.5 * i) * NS_PER_S), speed * 0.5 * i, 0.0, 0.0, speed)
        for i in range(7)
    )
    cams = tuple(CameraFrame(n, stamp, im) for n, im in zip(names, frames, strict=True))
    return Observation(stamp, cams, ego)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {f"p{q}": round(float(np.percentile(a, q)), 3) for q in (50, 90, 99)}


def _with_rollouts(planner: Planner, n: int) -> Planner:
    config = dataclasses.replace(
        planner.config, rollouts=dataclasses.replace(planner.config.rollouts, num_rollouts=n)
    )
    return Planner(planner.model, planner.tokenizer, config, planner.schema)


def run_strategy(
    planner: Planner, strategy: str, inputs: Sequence[Observation], warmup: int
) -> dict[str, Any]:
    """Latency and counters of `strategy` over `inputs` (after `warmup` untimed plans)."""
    for obs in inputs[:warmup]:
        planner.decode(obs, strategy)
    latencies, forwards, tokens, spec_steps, valid, rows = [], [], [], [], 0, []
    section = planner.scaffold.section("trajectory")
    for obs in inputs:
        t0 = time.perf_counter()
        try:
            decoded = planner.decode(obs, strategy)
            valid += 1
            result = decoded.result
        except ScaffoldParseError:
            result = None
        latencies.append((time.perf_counter() - t0) * 1e3)
        if result is None:
            continue
        n = result.tokens.shape[0]
        forwards.append(result.num_forwards)
        tokens.append(len(planner.scaffold) + (n - 1) * (section.end - section.start))
        spec_steps.append(result.num_spec_steps)
        rows.append(result.tokens)
    median_s = float(np.median(latencies)) / 1e3
    out = {
        "forwards_per_plan": float(np.mean(forwards)) if forwards else None,
        "tokens_per_plan": float(np.mean(tokens)) if tokens else None,
        "latency_ms": percentiles(latencies),
        "tokens_per_s": round(float(np.mean(tokens)) / median_s, 2) if tokens else None,
        "valid_fraction": valid / len(inputs),
    }
    return {"summary": out, "tokens": rows, "spec_steps": spec_steps}


def hf_generate(planner: Planner, inputs: Sequence[Observation], warmup: int) -> dict[str, Any]:
    """transformers' greedy `generate` with KV cache on the same decoder weights, writing
    the whole answer (no scaffold): the plain-AR-VLA baseline. Same vision and prompt."""
    import transformers

    dc = planner.model.config.decoder
    hf_config = transformers.Qwen2Config(**{**dc.to_dict(), "use_cache": True})
    hf = transformers.Qwen2ForCausalLM(hf_config).to(planner.dtype).eval()
    hf.load_state_dict(planner.model.decoder.state_dict())
    A = len(planner.scaffold)

    @torch.no_grad()
    def one(obs: Observation) -> np.ndarray:
        visual = planner.model.visual(planner.images(obs))
        layout = planner.render(obs)
        ids = torch.tensor(np.asarray(layout.token_ids), dtype=torch.long)
        embeds = planner.model.embed_prompt(ids, layout.image_spans, visual)
        out = hf.generate(
            inputs_embeds=embeds,
            attention_mask=torch.ones(1, embeds.shape[1], dtype=torch.long),
            max_new_tokens=A,
            min_new_tokens=A,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
        )
        return out[0, -A:].numpy()

    for obs in inputs[:warmup]:
        one(obs)
    latencies, valid = [], 0
    for obs in inputs:
        t0 = time.perf_counter()
        tokens = one(obs)
        try:
            planner.parse(tokens)
            valid += 1
        except ScaffoldParseError:
            pass  # counted: a plain AR model may break the structure
        latencies.append((time.perf_counter() - t0) * 1e3)
    median_s = float(np.median(latencies)) / 1e3
    return {
        "forwards_per_plan": float(A),
        "tokens_per_plan": float(A),
        "latency_ms": percentiles(latencies),
        "tokens_per_s": round(A / median_s, 2),
        "valid_fraction": valid / len(inputs),
    }


def run_bench(
    planner: Planner,
    strategies: Sequence[str],
    num_rollouts: int,
    iters: int,
    warmup: int = 1,
    seed: int = 0,
    with_hf: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The `blockplan bench` report (keys fixed by the issue; see docs/BENCHMARKS.md)."""
    say = progress or (lambda _msg: None)
    planner = _with_rollouts(planner, num_rollouts)
    inputs = [synthetic_observation(planner.config, seed + i) for i in range(iters)]
    mc = planner.model.config
    report: dict[str, Any] = {
        "model": {
            "params": planner.model.num_parameters(),
            "hidden_size": mc.decoder.hidden_size,
            "num_layers": mc.decoder.num_hidden_layers,
            "num_heads": mc.decoder.num_attention_heads,
            "num_kv_heads": mc.decoder.num_key_value_heads,
            "vocab_size": mc.decoder.vocab_size,
            "cameras": len(mc.camera_names),
            "frames": mc.num_frames,
            "tokens_per_image": mc.tokens_per_image,
            "block_size": mc.block_size,
            "prompt_tokens": planner.prompt_len,
            "answer_tokens": len(planner.scaffold),
            "editable_tokens": int(planner.scaffold.is_editable.sum()),
            "dtype": planner.config.model.dtype,
            "threads": torch.get_num_threads(),
            "iters": iters,
            "warmup": warmup,
        },
        "strategies": {},
    }
    runs = {}
    for name in strategies:
        say(f"bench: {name}")
        runs[name] = run_strategy(planner, name, inputs, warmup)
        report["strategies"][name] = runs[name]["summary"]
    if "ar" in runs and "scaffold_spec" in runs:
        pairs = list(zip(runs["ar"]["tokens"], runs["scaffold_spec"]["tokens"], strict=False))
        same = sum(np.array_equal(a, b) for a, b in pairs)
        report["scaffold_spec_identical_to_ar_fraction"] = same / max(len(pairs), 1)
    if "scaffold_spec" in runs:
        steps = sum(runs["scaffold_spec"]["spec_steps"])
        editable = int(planner.scaffold.is_editable.sum()) * len(runs["scaffold_spec"]["tokens"])
        report["scaffold_spec_tokens_per_step"] = round(editable / steps, 3) if steps else None
    if "rollouts" in runs:
        say("bench: rollouts n=1")
        one = run_strategy(_with_rollouts(planner, 1), "rollouts", inputs, warmup)["summary"]
        ratio = runs["rollouts"]["summary"]["latency_ms"]["p50"] / one["latency_ms"]["p50"]
        report["rollouts"] = {"n": num_rollouts, "latency_ratio_vs_n1": round(ratio, 3)}
    if with_hf:
        say("bench: hf_generate")
        report["hf_generate"] = hf_generate(planner, inputs, warmup)
    return report
