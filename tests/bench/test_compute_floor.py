"""The compute floor's two measurements: FLOPs counted exactly, GEMM rates at model shapes."""

from __future__ import annotations

import torch

from blockplan.bench.compute_floor import count_flops, floor_report, gemm_shapes, gemm_throughput
from blockplan.model.config import DecoderConfig
from blockplan.model.presets import PRESETS


def decoder_preset(name: str) -> DecoderConfig:
    return DecoderConfig(vocab_size=100, max_position_embeddings=512, **PRESETS[name])


def test_count_flops_is_two_mkn_per_matmul():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    assert count_flops(lambda: a @ b) == 2 * 7 * 5 * 3
    assert count_flops(lambda: (a @ b, a @ b)) == 2 * 2 * 7 * 5 * 3


def test_count_flops_counts_cpu_attention():
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    mask = torch.zeros(1, 1, 4, 6)
    flops = count_flops(
        lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True
        )
    )
    assert flops == 2 * (2 * 1 * 2 * 4 * 6 * 8)


def test_gemm_shapes_cover_every_projection_and_row_count():
    config = decoder_preset("test")
    shapes = gemm_shapes(config, (32, 100, 32))
    assert {s for s, _, _ in shapes} == {32, 100}
    assert (32, config.hidden_size, config.vocab_size) in shapes
    assert (32, config.intermediate_size, config.hidden_size) in shapes


def test_gemm_throughput_and_floor_report():
    rate = gemm_throughput(decoder_preset("test"), (8,), min_seconds=0.001)
    assert rate["best_flops_per_s"] >= rate["median_flops_per_s"] > 0
    report = floor_report(flops=2_000_000, latency_ms=10.0, flops_per_s=1e9)
    assert report == {
        "flops_per_plan": 2_000_000,
        "compute_floor_ms": 2.0,
        "compute_floor_ratio": 5.0,
    }
