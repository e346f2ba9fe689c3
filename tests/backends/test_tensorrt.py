"""TensorRT backend (needs a CUDA GPU and TensorRT 10; skipped elsewhere): engines build and
are cached by key, and the engine's plans match torch (fp16: logits within 5e-2)."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.backends.trt_build import engine_key
from blockplan.config import PlannerConfig
from blockplan.engine.bench import synthetic_observation
from blockplan.engine.planner import Planner
from tests.backends.conftest import with_backend


def test_engine_key_names_gpu_version_weights_and_precision():
    key = engine_key("NVIDIA H200 (SXM)", "10.9.0.34", "ab" * 32, "fp16")
    assert key == "NVIDIA_H200_SXM-trt10.9.0.34-abababababababab-fp16"
    assert engine_key("NVIDIA H200", "10.9.0.34", "ab" * 32, "int8") != key


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_tensorrt_engines_build_cache_and_run(tmp_path, precision):
    pytest.importorskip("tensorrt")
    from blockplan.backends.factory import create_backend
    from blockplan.backends.trt_build import ENGINE_SIDECAR

    reference = Planner.random_init("test", with_backend(PlannerConfig(), "torch"), seed=1)
    L, B = reference.cache.max_len, reference.cache.max_batch
    backend = create_backend(
        "tensorrt", reference.model, L, B, engine_dir=tmp_path, precision=precision
    )
    (folder,) = [p for p in tmp_path.iterdir() if (p / ENGINE_SIDECAR).is_file()]
    assert folder.name.endswith(precision)
    stamp = (folder / ENGINE_SIDECAR).stat().st_mtime_ns
    create_backend("tensorrt", reference.model, L, B, engine_dir=tmp_path, precision=precision)
    assert (folder / ENGINE_SIDECAR).stat().st_mtime_ns == stamp  # cached, not rebuilt
    trt_planner = Planner(
        reference.model, reference.tokenizer, reference.config, reference.schema, backend
    )
    obs = synthetic_observation(reference.config, 3)
    for strategy in ("ar", "scaffold_spec", "rollouts"):
        got = trt_planner.decode(obs, strategy)  # runs and parses strictly
        assert got.result.tokens.shape[1] == len(reference.scaffold)
    if precision == "fp16":
        want = reference.decode(obs, "ar").result.tokens
        same = np.mean(trt_planner.decode(obs, "ar").result.tokens == want)
        assert same > 0.9  # fp16 may flip near-ties; most tokens agree


@pytest.mark.gpu
def test_cuda_graph_replay_equals_plain_execution(tmp_path):
    pytest.importorskip("tensorrt")
    import torch

    from blockplan.backends.factory import create_backend

    reference = Planner.random_init("test", with_backend(PlannerConfig(), "torch"), seed=2)
    L, B = reference.cache.max_len, reference.cache.max_batch
    backend = create_backend("tensorrt", reference.model, L, B, engine_dir=tmp_path)
    executor = backend.executor
    from blockplan.export.onnx_export import step_example

    args = step_example(reference.model, executor.windows[0], L)
    args = (torch.randn_like(args[0]), args[1], args[2], torch.randn_like(args[3]))
    first = executor.step(*args)  # plain execute_async_v3, then capture
    replayed = executor.step(*args)  # CUDA graph replay
    (ctx,) = executor.contexts.values()
    assert ctx.graph is not None
    for a, b in zip(first, replayed, strict=True):
        torch.testing.assert_close(a, b)
