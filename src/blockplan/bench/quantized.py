"""Float32 against its quantized copies (`blockplan bench --quantized int8,w4,fp8`).

One interleaved run on one machine: the same weights, quantized in memory per scheme
(model/quantized.py), each a Planner on the configured backend. Reports per variant the
plans' latency and its ratio to float32, the fraction of plans (and of tokens) equal to
float32's, ms per decoder forward by width after the prompt's slots, and the bytes of its
weights as a folder stores them. `--ort-forwards` adds ONNX Runtime's decoder step, float
against INT8 by both methods of export/ort_quant.py (blockwise, dynamic), timed the same way — for any model, also one the
planner cannot run on ONNX Runtime (a Qwen2.5-VL shape: its step graph with plain RoPE, the
same cost).
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from blockplan.bench.backends import run_backend_bench
from blockplan.bench.decoding import Progress
from blockplan.bench.graphs import forward_ms_by_width
from blockplan.model.quantized import DEFAULT_MODULES, QuantLinear, QuantSpec
from blockplan.model.quantized_folder import decoder_of, quantized_copy
from blockplan.planner.planner import Planner

REFERENCE = "float32"


def weight_bytes(model: torch.nn.Module, spec: QuantSpec | None) -> int:
    """Bytes of the model's tensors as its folder stores them (a tied head once): codes and
    scales as they are, float tensors in float32 or the scheme's `float_storage`."""
    storage = getattr(torch, spec.float_storage) if spec is not None else torch.float32
    float_size = torch.empty(0, dtype=storage).element_size()
    codes = {
        b.data_ptr() for m in model.modules() if isinstance(m, QuantLinear) for b in m.buffers()
    }
    seen, total = set(), 0
    for tensor in model.state_dict().values():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        floating = tensor.is_floating_point() and tensor.data_ptr() not in codes
        total += tensor.numel() * (float_size if floating else tensor.element_size())
    return int(total)


def default_spec(scheme: str) -> QuantSpec:
    """What `blockplan quantize --scheme SCHEME` writes by default."""
    storage = "float16" if scheme == "w4" else "float32"
    return QuantSpec(scheme, float_storage=storage, modules=DEFAULT_MODULES[scheme])


def quantized_planners(planner: Planner, schemes: Sequence[str]) -> dict[str, Planner]:
    """float32 (the planner itself) and one planner per scheme over a quantized copy."""
    out = {REFERENCE: planner}
    for scheme in schemes:
        model = quantized_copy(planner.model, default_spec(scheme))
        other = Planner(model, planner.tokenizer, planner.config, planner.schema, weights=scheme)
        other.drafts = planner.drafts
        out[scheme] = other
    return out


def run_quantized_bench(
    planner: Planner,
    schemes: Sequence[str],
    strategies: Sequence[str],
    iters: int,
    warmup: int = 1,
    seed: int = 0,
    reps: int = 5,
    rounds: int = 3,
    past: int | None = None,
    ort_forwards: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    planners = quantized_planners(planner, schemes)
    report: dict[str, Any] = {}
    if strategies:
        report = run_backend_bench(planners, strategies, iters, warmup, seed, progress=say)
        report["reference"] = report.pop("reference_backend")
        report["variants"] = report.pop("backends")
    P = planner.prompt_len if past is None else past
    widths = [1, planner.model.config.block_size]
    say(f"bench quantized: forwards of width {widths} after {P} slots, {rounds} rounds")
    times: dict[str, dict[str, list[float]]] = {v: {} for v in planners}
    for r in range(rounds):  # interleaved, order alternating, so drift hits all alike
        order = list(planners) if r % 2 == 0 else list(planners)[::-1]
        for name in order:
            for w, ms in forward_ms_by_width(planners[name], widths, reps, P).items():
                times[name].setdefault(w, []).append(ms)
    forwards = {v: {w: float(np.median(t)) for w, t in ts.items()} for v, ts in times.items()}
    report["forward_argmax_agreement_vs_float32"] = logits_agreement(planners, widths[-1], P)
    report["forward_ms_by_width"] = {"backend": planner.runner.name, "past_slots": P, **forwards}
    report["forward_ratio_vs_float32"] = {
        v: {w: round(ms / forwards[REFERENCE][w], 3) for w, ms in per.items()}
        for v, per in forwards.items()
        if v != REFERENCE
    }
    sizes = {REFERENCE: weight_bytes(planner.model, None)}
    sizes |= {s: weight_bytes(planners[s].model, default_spec(s)) for s in schemes}
    report["weights_bytes"] = sizes
    report["weights_ratio_vs_float32"] = {s: round(sizes[s] / sizes[REFERENCE], 3) for s in schemes}
    if ort_forwards:
        say("bench quantized: ONNX Runtime decoder step, float32 against INT8 (two methods)")
        report["ort_decoder_forwards"] = ort_decoder_forwards(
            planner, widths, P, reps, rounds, planner.config.model.num_threads
        )
    return report


@torch.no_grad()
def logits_agreement(planners: dict[str, Planner], width: int, past: int) -> dict[str, float]:
    """The fraction of rows whose argmax equals float32's, per variant: one forward of
    `width` random embeddings after `past` random ones (B = 1)."""
    from blockplan.model.masks import causal_mask

    c = planners[REFERENCE].model.config.decoder
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, past + width, c.hidden_size, generator=gen) * 0.1
    out = {}
    for name, p in planners.items():
        p.cache.reset()
        embeds = x.to(device=p.device, dtype=p.dtype)
        logits = p.runner(inputs_embeds=embeds, mask=causal_mask(past + width), cache=p.cache)
        out[name] = logits[0, past:].float().argmax(-1).cpu()
        p.cache.reset()
    return {
        n: float((ids == out[REFERENCE]).float().mean()) for n, ids in out.items() if n != REFERENCE
    }


def _plain_rope(decoder: torch.nn.Module, max_len: int) -> Any:
    """`decoder` as `build_step_graph` reads it, with plain RoPE (a multimodal-RoPE model's
    text positions) and a RoPE table of `max_len` rows."""
    import dataclasses

    config = dataclasses.replace(
        decoder.config, mrope_section=None, max_position_embeddings=max_len
    )
    return SimpleNamespace(config=config, model=decoder.model, lm_head=decoder.lm_head)


@torch.no_grad()
def ort_decoder_forwards(
    planner: Planner, widths: Sequence[int], past: int, reps: int, rounds: int, threads: int
) -> dict[str, Any]:
    """Median ms of ONNX Runtime's dynamic decoder step (B = 1, w new tokens after `past`
    cache slots), float32 and INT8 by each method (`int8_blockwise`, `int8_dynamic`),
    interleaved; and per method its speed-up, its logits' largest difference and argmax
    agreement with float32."""
    import onnx
    import onnxruntime as ort

    from blockplan.export.ort_quant import METHODS, quantize_graph
    from blockplan.export.ort_step import build_step_graph

    decoder = decoder_of(planner.model)
    c = decoder.config
    max_len = planner.cache.max_len
    with tempfile.TemporaryDirectory(prefix="blockplan-ortq-") as tmp:
        float_path = Path(tmp) / "float.onnx"
        paths = {REFERENCE: float_path} | {f"int8_{m}": Path(tmp) / f"{m}.onnx" for m in METHODS}
        if decoder.lm_head.weight.dtype != torch.float32:
            decoder = copy.deepcopy(decoder).float()
        graph = build_step_graph(_plain_rope(decoder, max_len), max_len)
        onnx.save(graph, str(float_path), save_as_external_data=True, location="float.data")
        del graph
        for method in METHODS:
            quantize_graph(float_path, paths[f"int8_{method}"], large=True, method=method)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        sessions = {
            name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            for name, path in paths.items()
        }
        gen = torch.Generator().manual_seed(0)
        kv = {
            f"past_{kind}_{i}": torch.randn(
                1, c.num_key_value_heads, past, c.dim_per_head, generator=gen
            ).numpy()
            for i in range(c.num_hidden_layers)
            for kind in ("k", "v")
        }
        feeds = {}
        for w in widths:
            mask = np.ones((1, w, past + w), dtype=bool)
            mask[0, :, past:] = np.tril(np.ones((w, w), dtype=bool))
            feeds[w] = {
                "inputs_embeds": torch.randn(1, w, c.hidden_size, generator=gen).numpy() * 0.1,
                "positions": np.arange(past, past + w, dtype=np.int64)[None],
                "attention_mask": mask,
                "logit_rows": np.arange(w, dtype=np.int64),
                **kv,
            }
        times: dict[str, dict[int, list[float]]] = {n: {w: [] for w in widths} for n in sessions}
        logits: dict[str, dict[int, np.ndarray]] = {n: {} for n in sessions}
        for r in range(rounds):
            order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
            for name in order:
                for w in widths:
                    logits[name][w] = sessions[name].run(["logits"], feeds[w])[0]  # untimed
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        sessions[name].run(["logits"], feeds[w])
                        times[name][w].append((time.perf_counter() - t0) * 1e3)
        del sessions
    ms = {
        n: {str(w): round(float(np.median(t)), 3) for w, t in per.items()}
        for n, per in times.items()
    }
    variants = [n for n in ms if n != REFERENCE]
    return {
        "past_slots": past,
        "threads": threads,
        "ms": ms,
        "speedup": {
            n: {str(w): round(ms[REFERENCE][str(w)] / ms[n][str(w)], 3) for w in widths}
            for n in variants
        },
        "logits_max_abs_diff": {
            n: {str(w): float(np.abs(logits[n][w] - logits[REFERENCE][w]).max()) for w in widths}
            for n in variants
        },
        "argmax_agreement": {
            n: {
                str(w): float(np.mean(logits[n][w].argmax(-1) == logits[REFERENCE][w].argmax(-1)))
                for w in widths
            }
            for n in variants
        },
    }
