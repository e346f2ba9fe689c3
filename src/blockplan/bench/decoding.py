"""Benchmark the decoding strategies on one model and one set of inputs (`blockplan bench`).

Speed is reported as ratios between strategies measured in one run (the machine is shared
and noisy); nothing here asserts a wall-clock threshold.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockplan.bench.compute_floor import (
    count_flops,
    floor_report,
    gemm_throughput,
    onnxruntime_gemm_throughput,
)
from blockplan.decoding.strategies import rollout_section
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_input
from blockplan.schema import ScaffoldParseError
from blockplan.types import Observation, RobotObservation

Progress = Callable[[str], None]
FLOOR_BACKENDS = ("torch", "onnxruntime")  # the CPU backends `add_compute_floor` measures


def percentiles(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {f"p{q}": round(float(np.percentile(a, q)), 3) for q in (50, 90, 99)}


def _with_rollouts(planner: Planner, n: int) -> Planner:
    config = planner.config.with_params({"rollouts.num_rollouts": n})
    return planner.sibling(config, planner.runner)


@dataclass
class Run:
    """One plan's outcome: answer tokens (N, A) or None when the strict parse failed."""

    latency_ms: float
    tokens: np.ndarray | None
    num_forwards: int
    num_spec_steps: int
    stage_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # Plan.timings_ms
    active_blocks: tuple[int, ...] = ()  # pipelined: blocks denoised per forward
    hint: np.ndarray | None = None  # the previous answer it drafted from (a sequence)
    num_draft_forwards: int = 0  # dflash: the drafter's forwards (not the target's)


Runner = Callable[[Observation | RobotObservation], Run]


def strategy_runner(planner: Planner, strategy: str, sequence: bool = False) -> Runner:
    """Plans with `strategy`. Independent inputs (`sequence` False): no draft from the last
    plan, which in the round-robin is often another strategy's answer to this very input.
    A sequence (consecutive observations of a bag): the strategy drafts from its own previous
    answer, as the node does at the control rate; the frame stream is reset before every plan,
    so that only the answer carries over and no strategy reuses the prefill another one just
    computed for the same frames (`bench --streaming` measures streaming)."""
    previous: list[np.ndarray | None] = [None]

    def run(obs: Observation) -> Run:
        if sequence:
            planner.reset_stream()
        hint = planner.previous_answer = previous[0]
        t0 = time.perf_counter()
        try:
            decoded = planner.decode(obs, strategy)
        except ScaffoldParseError:
            return Run((time.perf_counter() - t0) * 1e3, None, 0, 0, hint=hint)
        finally:
            if sequence:
                previous[0] = planner.previous_answer
        r = decoded.result
        latency = (time.perf_counter() - t0) * 1e3
        stages = dict(decoded.plan.timings_ms)
        return Run(
            latency,
            r.tokens,
            r.num_forwards,
            r.num_spec_steps,
            stages,
            r.active_blocks,
            hint,
            r.num_draft_forwards,
        )

    return run


def hf_generate_runner(planner: Planner) -> Runner:
    """transformers' greedy `generate` with KV cache on the same decoder weights, writing
    the whole answer (no scaffold): the plain-AR-VLA baseline. Same vision and prompt."""
    import transformers

    dc = planner.model.config.decoder
    hf_config = transformers.Qwen2Config(**{**dc.to_dict(), "use_cache": True})
    hf = transformers.Qwen2ForCausalLM(hf_config).to(planner.device, planner.dtype).eval()
    hf.load_state_dict(planner.model.decoder.state_dict())
    A = len(planner.scaffold)

    @torch.no_grad()
    def run(obs: Observation) -> Run:
        t0 = time.perf_counter()
        visual = planner.model.visual(planner.images(obs))
        layout = planner.render(obs)
        ids = torch.tensor(np.asarray(layout.token_ids), dtype=torch.long, device=planner.device)
        embeds = planner.model.embed_prompt(ids, layout.image_spans, visual, **layout.ego_inputs())
        out = hf.generate(
            inputs_embeds=embeds,
            attention_mask=torch.ones(1, embeds.shape[1], dtype=torch.long, device=embeds.device),
            max_new_tokens=A,
            min_new_tokens=A,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
        )
        tokens = out[0, -A:].cpu().numpy()
        try:
            planner.parse(tokens)
            parsed = tokens[None]
        except ScaffoldParseError:
            parsed = None  # counted: a plain AR model may break the structure
        return Run((time.perf_counter() - t0) * 1e3, parsed, A, 0)

    return run


def summarize(
    runs: Sequence[Run], tokens_per_plan: float, editable: int | None = None
) -> dict[str, Any]:
    """`editable`: the editable slots per plan, for `editable_tokens_per_forward` (the
    tokens each target forward decided, the prefill included)."""
    latencies = [r.latency_ms for r in runs]
    ok = [r for r in runs if r.tokens is not None]
    counted = [r.num_forwards for r in runs if r.num_forwards > 0]
    median_s = float(np.median(latencies)) / 1e3
    forwards = float(np.mean(counted)) if counted else None
    extra = {}
    if editable is not None and forwards:
        extra["editable_tokens_per_forward"] = round(editable / forwards, 3)
    drafts = [r.num_draft_forwards for r in runs]
    if any(drafts):
        extra["draft_forwards_per_plan"] = float(np.mean(drafts))
    return {
        **extra,
        "forwards_per_plan": forwards,
        "tokens_per_plan": tokens_per_plan,
        "latency_ms": percentiles(latencies),
        "tokens_per_s": round(tokens_per_plan / median_s, 2),
        "valid_fraction": len(ok) / len(runs),
    }


def stage_medians(runs: Sequence[Run]) -> dict[str, float]:
    """Median ms per stage (encode, prompt, prefill, one per section, post) over the runs."""
    stages = sorted({name for r in runs for name in r.stage_ms})
    return {
        name: round(float(np.median([r.stage_ms.get(name, 0.0) for r in runs])), 3)
        for name in stages
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
    with_floor: bool = True,
    sequence: Sequence[Observation] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The `blockplan bench` report (keys fixed by the issue; see docs/BENCHMARKS.md).

    Strategies run round-robin on each input, so load drift on a shared machine hits them
    alike; `warmup` untimed rounds come first. `with_floor` adds each strategy's compute
    floor (bench/compute_floor.py) for a backend on the CPU (torch or onnxruntime). The
    inputs are
    independent synthetic observations, or the first `warmup + iters` of `sequence`
    (consecutive observations, e.g. `replay.observations.bag_observations` of the bag
    `source`), which each strategy plans in order, drafting from its own previous answer.
    """
    say = progress or (lambda _msg: None)
    planner = _with_rollouts(planner, num_rollouts)
    in_order = sequence is not None
    runners = {name: strategy_runner(planner, name, in_order) for name in strategies}
    if "rollouts" in runners:
        n1 = _with_rollouts(planner, 1)
        runners["rollouts_n1"] = strategy_runner(n1, "rollouts", in_order)
    # The baseline rebuilds the decoder as a plain Qwen2 (1-D RoPE): not for mRoPE models;
    # a robot model writes no text answer it could be compared on.
    with_hf = with_hf and planner.model.config.decoder.mrope_section is None
    with_hf = with_hf and getattr(planner.model.config, "embodiment", "vehicle") == "vehicle"
    # HF generate decodes the digit tokens: nothing to compare a flow head's plan with.
    with_hf = with_hf and planner.flow is None
    if with_hf:
        runners["hf_generate"] = hf_generate_runner(planner)
    if sequence is None:
        inputs = [
            synthetic_input(planner.config, seed + i, planner.schema) for i in range(warmup + iters)
        ]
    else:
        if len(sequence) < warmup + iters:
            raise ValueError(
                f"the sequence has {len(sequence)} observations: fewer than warm-up {warmup} "
                f"+ iters {iters}"
            )
        inputs = list(sequence[: warmup + iters])
    runs: dict[str, list[Run]] = {name: [] for name in runners}
    for i, obs in enumerate(inputs):
        say(f"bench: round {i + 1}/{len(inputs)}" + (" (warm-up)" if i < warmup else ""))
        for name, runner in runners.items():
            run = runner(obs)
            if i >= warmup:
                runs[name].append(run)
    A = len(planner.scaffold)
    trajectory = rollout_section(planner.scaffold)  # what each extra rollout decodes
    report: dict[str, Any] = {"model": model_summary(planner, iters, warmup), "strategies": {}}
    report["inputs"] = (
        {"kind": "synthetic", "independent": True}
        if sequence is None
        else {"kind": "sequence", "independent": False, "source": source, "count": len(inputs)}
    )
    for name in strategies:
        n = num_rollouts if name == "rollouts" else 1
        tokens = A + (n - 1) * (trajectory.end - trajectory.start)
        editable = int(planner.scaffold.is_editable.sum()) + (n - 1) * trajectory.num_editable
        report["strategies"][name] = summarize(runs[name], float(tokens), editable)
    report["stage_ms_p50"] = {name: stage_medians(runs[name]) for name in strategies}
    if "ar" in runs and "scaffold_spec" in runs:
        pairs = list(zip(runs["ar"], runs["scaffold_spec"], strict=True))
        same = sum(
            a.tokens is not None and b.tokens is not None and np.array_equal(a.tokens, b.tokens)
            for a, b in pairs
        )
        report["scaffold_spec_identical_to_ar_fraction"] = same / len(pairs)
    if "scaffold_spec" in runs:
        steps = sum(r.num_spec_steps for r in runs["scaffold_spec"])
        editable = int(planner.scaffold.is_editable.sum()) * len(runs["scaffold_spec"])
        report["scaffold_spec_tokens_per_step"] = round(editable / steps, 3) if steps else None
    if "dflash" in runs:
        add_dflash_report(report, runs)
    if "pipelined" in runs:
        add_pipeline_report(report, runs["pipelined"])
    if "rollouts" in runs:
        one = summarize(runs["rollouts_n1"], float(A))["latency_ms"]["p50"]
        ratio = report["strategies"]["rollouts"]["latency_ms"]["p50"] / one
        report["rollouts"] = {"n": num_rollouts, "latency_ratio_vs_n1": round(ratio, 3)}
    if with_hf:
        report["hf_generate"] = summarize(runs["hf_generate"], float(A))
        spec = report["strategies"].get("scaffold_spec")
        if spec:
            hf_p50 = report["hf_generate"]["latency_ms"]["p50"]
            report["scaffold_spec_speedup_vs_hf_generate"] = round(
                hf_p50 / spec["latency_ms"]["p50"], 2
            )
    if planner.flow is not None:
        say("bench: flow head, cached vs uncached schedule")
        report["flow_head"] = flow_head_report(planner, inputs[warmup:] or inputs, num_rollouts)
    if with_floor and planner.device.type == "cpu" and planner.runner.name in FLOOR_BACKENDS:
        say("bench: compute floor (GEMM throughput, FLOPs per plan)")
        if sequence is None:
            add_compute_floor(report, planner, strategies, inputs[0])
        else:  # a timed plan in the middle, with the answer its strategy drafted from there
            k = iters // 2
            hints = {name: runs[name][k].hint for name in strategies}
            add_compute_floor(report, planner, strategies, inputs[warmup + k], hints)
    return report


def flow_head_report(
    planner: Planner, inputs: Sequence[Observation], num_rollouts: int, repeats: int = 5
) -> dict[str, Any]:
    """`flow_head.*`: the head's integration with every Euler step evaluated (`ms_uncached`)
    and with the configured `flow.evaluate_steps` (`ms_cached`), timed alternately on the
    same prefix K/V (each input's, after its text sections) and the same noise, median
    over inputs x repeats; `cached_speedup` = uncached / cached; `max_waypoint_diff_m` the
    largest waypoint distance between the two over the inputs (`mean_waypoint_diff_m` the
    mean). `n1` is one plan's noise; `n<N>` the N-rollout batch over the forked prefix."""
    flow = planner.flow
    every = tuple(range(1, flow.num_steps + 1))
    out: dict[str, Any] = {
        "num_steps": flow.num_steps,
        "evaluate_steps": list(flow.evaluate_steps),
        "head_params": sum(p.numel() for p in flow.head.parameters()),
    }
    seed = planner.config.rollouts.seed
    for n in sorted({1, num_rollouts}):
        times: dict[str, list[float]] = {"uncached": [], "cached": []}
        diffs: list[float] = []
        calls = {}
        for obs in inputs:
            planner.decode(obs, "scaffold_spec")  # the cache now holds this input's prefix
            keys, values = (t.clone() for t in flow.prefix(planner.cache))
            if n > 1:
                keys = keys.expand(-1, n, -1, -1, -1).contiguous()
                values = values.expand(-1, n, -1, -1, -1).contiguous()
            from blockplan.decoding.flow import flow_noise

            noise = flow_noise(seed, n, obs.stamp_ns)
            result = {}
            for _ in range(repeats):
                for name, steps in (("uncached", every), ("cached", flow.evaluate_steps)):
                    t0 = time.perf_counter()
                    result[name], calls[name] = flow.sample_prefix(keys, values, noise, steps)
                    times[name].append((time.perf_counter() - t0) * 1e3)
            gap = np.linalg.norm(result["uncached"] - result["cached"], axis=-1)  # (n, 5)
            diffs.append(float(gap.max()))
            diffs.append(float(gap.mean()))
        uncached = float(np.median(times["uncached"]))
        cached = float(np.median(times["cached"]))
        out[f"n{n}"] = {
            "ms_uncached": round(uncached, 3),
            "ms_cached": round(cached, 3),
            "cached_speedup": round(uncached / cached, 3),
            "max_waypoint_diff_m": round(max(diffs[0::2]), 4),
            "mean_waypoint_diff_m": round(float(np.mean(diffs[1::2])), 4),
            "evaluations": calls,
        }
    out.update(
        {
            k: out["n1"][k]
            for k in (
                "ms_uncached",
                "ms_cached",
                "cached_speedup",
                "max_waypoint_diff_m",
                "mean_waypoint_diff_m",
            )
        }
    )
    return out


def add_dflash_report(report: dict[str, Any], runs: dict[str, list[Run]]) -> None:
    """`dflash`: whether its tokens equal AR's (else scaffold spec's, itself AR's) on every
    plan, and its target forwards and p50 latency as ratios to scaffold spec's."""
    base = "ar" if "ar" in runs else "scaffold_spec" if "scaffold_spec" in runs else None
    entry: dict[str, Any] = {}
    if base is not None:
        pairs = list(zip(runs[base], runs["dflash"], strict=True))
        same = sum(
            a.tokens is not None and b.tokens is not None and np.array_equal(a.tokens, b.tokens)
            for a, b in pairs
        )
        entry[f"identical_to_{base}_fraction"] = same / len(pairs)
    spec = report["strategies"].get("scaffold_spec")
    mine = report["strategies"]["dflash"]
    if spec and spec["forwards_per_plan"] and mine["forwards_per_plan"]:
        entry["scaffold_spec_forwards_over_dflash"] = round(
            spec["forwards_per_plan"] / mine["forwards_per_plan"], 3
        )
        entry["dflash_latency_over_scaffold_spec_p50"] = round(
            mine["latency_ms"]["p50"] / spec["latency_ms"]["p50"], 3
        )
    report["dflash"] = entry


def add_pipeline_report(report: dict[str, Any], runs: Sequence[Run]) -> None:
    """`pipelined_speedup_vs_<name>`: pipelined tokens/s over full_diffusion's and
    section_diffusion's (where they ran; same tokens per plan, so a ratio of median
    latencies), and `pipelined_mean_active_blocks`: the blocks each of its forwards denoised."""
    strategies = report["strategies"]
    mine = strategies["pipelined"]["tokens_per_s"]
    for name in ("full_diffusion", "section_diffusion"):
        if name in strategies and strategies[name]["tokens_per_s"] > 0:
            ratio = mine / strategies[name]["tokens_per_s"]
            report[f"pipelined_speedup_vs_{name}"] = round(ratio, 3)
    active = [n for r in runs for n in r.active_blocks]
    report["pipelined_mean_active_blocks"] = round(float(np.mean(active)), 3) if active else None


def add_compute_floor(
    report: dict[str, Any],
    planner: Planner,
    strategies: Sequence[str],
    obs: Observation,
    hints: dict[str, np.ndarray | None] | None = None,
) -> None:
    """`strategies.<name>.compute_floor_ms` / `.compute_floor_ratio` and the measured GEMM
    rate: FLOPs counted on one untimed plan (drafting from `hints[name]`, else cold),
    against this CPU's best matmul throughput now, over torch's GEMMs and ONNX Runtime's.
    A non-torch runner's plan is counted on a torch twin of the planner (the same weights
    and config): the same tokens, hence the same forwards at the same shapes."""
    mc = planner.model.config
    rows = (mc.block_size, planner.prompt_len)
    rate = gemm_throughput(mc.decoder, rows, planner.dtype)
    best = {"torch": rate}
    if planner.dtype == torch.float32:
        ort_rate = onnxruntime_gemm_throughput(mc.decoder, rows)
        if ort_rate is not None:
            best["onnxruntime"] = ort_rate
    library = max(best, key=lambda name: best[name]["best_flops_per_s"])
    report["gemm"] = {
        "best_gflops_per_s": round(best[library]["best_flops_per_s"] / 1e9, 2),
        "median_gflops_per_s": round(best[library]["median_flops_per_s"] / 1e9, 2),
        "library": library,
        "by_library": {name: round(r["best_flops_per_s"] / 1e9, 2) for name, r in best.items()},
        "threads": torch.get_num_threads(),
    }
    hints = hints or {}
    counted = planner
    if planner.runner.name != "torch":
        config = planner.config.with_params({"model.backend": "torch"})
        counted = planner.sibling(config)

    def plan(name: str) -> None:
        counted.reset_stream()
        counted.previous_answer = hints.get(name)
        counted.decode(obs, name)

    for name in strategies:
        flops = count_flops(lambda name=name: plan(name))
        entry = report["strategies"][name]
        entry.update(
            floor_report(flops, entry["latency_ms"]["p50"], best[library]["best_flops_per_s"])
        )


def device_name(device: torch.device) -> str:
    """`cpu`, or the GPU's name (`cuda:0 NVIDIA H200`): what a latency was measured on."""
    if device.type != "cuda":
        return str(device)
    return f"{device} {torch.cuda.get_device_name(device)}"


def model_summary(planner: Planner, iters: int, warmup: int) -> dict[str, Any]:
    mc = planner.model.config
    return {
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
        "device": device_name(planner.device),
        "threads": torch.get_num_threads(),
        "iters": iters,
        "warmup": warmup,
    }
