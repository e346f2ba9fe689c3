"""How far a plan's latency is from what its arithmetic costs on this CPU (`blockplan bench`).

Two measurements, both taken in the bench run itself so they see the same machine load:

* the plan's work: the matmul / attention FLOPs of one decode, counted by torch's
  `FlopCounterMode` on an untimed plan (prefill, every window forward, the LM-head rows the
  forwards actually compute — exactly what the engine ran, nothing estimated);
* this CPU's matmul throughput at the model's own shapes: a short GEMM micro-benchmark of
  (S, W) @ (W, N) for the decoder's projection widths N (q/k/v, o, gate/up, down, LM head) at
  the window widths a plan runs (S = block size and the prompt length), with the bench's
  thread count, on every GEMM library the planner can run on: torch's (MKL / oneDNN) and,
  where it is installed, ONNX Runtime's (MLAS; on some CPUs the faster of the two). The best
  of all measured shapes and libraries is the attainable rate; a plan whose every matmul ran
  at that rate would take `flops / rate`.

`compute_floor_ms` is that time and `compute_floor_ratio` = measured latency / floor: 1.0 would
mean no time outside the arithmetic; the rest is per-op overhead (Python, dispatch, small
tensors, memory traffic of the non-matmul ops).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from blockplan.model.config import DecoderConfig


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    """CPU SDPA (`_scaled_dot_product_flash_attention_for_cpu`), which torch's counter does
    not know: Q·Kᵀ and P·V, 2·B·H·S·L·D each (GQA: every query head reads its group's K/V)."""
    B, H, S, D = query_shape
    L = key_shape[-2]
    return 2 * (2 * B * H * S * L * D)


_CUSTOM = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops}


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the matmuls and attention `fn` runs (one call, untimed)."""
    with FlopCounterMode(display=False, custom_mapping=_CUSTOM) as counter:
        fn()
    return int(counter.get_total_flops())


def gemm_shapes(config: DecoderConfig, rows: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(S, K, N) of the decoder's matmuls for each row count S in `rows`."""
    W, D = config.hidden_size, config.dim_per_head
    outs = {
        (W, config.num_attention_heads * D),  # q_proj
        (W, config.num_key_value_heads * D),  # k_proj, v_proj
        (config.num_attention_heads * D, W),  # o_proj
        (W, config.intermediate_size),  # gate_proj, up_proj
        (config.intermediate_size, W),  # down_proj
        (W, config.vocab_size),  # lm_head
    }
    return [(s, k, n) for s in sorted(set(rows)) for k, n in sorted(outs)]


def gemm_throughput(
    config: DecoderConfig,
    rows: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    min_seconds: float = 0.02,
) -> dict[str, float]:
    """Best and median FLOP/s over the model's GEMM shapes on this CPU (current threads)."""
    rates = []
    for s, k, n in gemm_shapes(config, rows):
        a, b = torch.randn(s, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        out = torch.empty(s, n, dtype=dtype)
        torch.matmul(a, b, out=out)  # warm the kernel choice
        reps, elapsed = 0, 0.0
        t0 = time.perf_counter()
        while elapsed < min_seconds:
            torch.matmul(a, b, out=out)
            reps += 1
            elapsed = time.perf_counter() - t0
        rates.append(2.0 * s * k * n * reps / elapsed)
    rates.sort()
    return {"best_flops_per_s": rates[-1], "median_flops_per_s": rates[len(rates) // 2]}


def onnxruntime_gemm_throughput(
    config: DecoderConfig,
    rows: tuple[int, ...],
    min_seconds: float = 0.02,
    repeats: int = 8,
) -> dict[str, float] | None:
    """`gemm_throughput` for ONNX Runtime's CPU MatMul (float32, one intra-op thread per
    torch thread), or None without onnxruntime. Each call runs `repeats` MatMul nodes on the
    same input, so the per-call overhead is spread as it is over a decoder graph's nodes."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    rates = []
    for s, k, n in gemm_shapes(config, rows):
        weight = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["a", "w"], [f"y{i}"]) for i in range(repeats)]
        graph = helper.make_graph(
            nodes,
            "gemm",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [s, k])],
            [
                helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [s, n])
                for i in range(repeats)
            ],
            [weight],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, 9)
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {"a": rng.standard_normal((s, k)).astype(np.float32)}
        session.run(None, feeds)
        calls, elapsed = 0, 0.0
        t0 = time.perf_counter()
        while elapsed < min_seconds:
            session.run(None, feeds)
            calls += 1
            elapsed = time.perf_counter() - t0
        rates.append(2.0 * s * k * n * repeats * calls / elapsed)
    rates.sort()
    return {"best_flops_per_s": rates[-1], "median_flops_per_s": rates[len(rates) // 2]}


def floor_report(flops: int, latency_ms: float, flops_per_s: float) -> dict[str, float]:
    floor_ms = 1e3 * flops / flops_per_s
    return {
        "flops_per_plan": flops,
        "compute_floor_ms": round(floor_ms, 3),
        "compute_floor_ratio": round(latency_ms / floor_ms, 2) if floor_ms > 0 else None,
    }
