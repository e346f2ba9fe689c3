"""TensorRT backend (needs a CUDA GPU and TensorRT 10; skipped elsewhere): engines build and
are cached by key, and the engine's plans match torch (fp16: logits within 5e-2)."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.backends.trt_build import engine_key
from blockplan.config import PlannerConfig
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from tests.backends.conftest import with_backend
from tests.optional import importorskip


def test_engine_key_names_gpu_version_weights_and_precision():
    key = engine_key("NVIDIA H200 (SXM)", "10.9.0.34", "ab" * 32, "fp16")
    assert key == "NVIDIA_H200_SXM-trt10.9.0.34-abababababababab-fp16"
    assert engine_key("NVIDIA H200", "10.9.0.34", "ab" * 32, "int8") != key


@pytest.fixture(scope="module")
def trt_fp16(tmp_path_factory):
    """One fp16 engine build of the `test` preset, shared by the GPU tests."""
    importorskip("tensorrt")
    from blockplan.backends.factory import create_backend

    root = tmp_path_factory.mktemp("engines")
    reference = Planner.random_init("test", with_backend(PlannerConfig(), "torch"), seed=1)
    L, B = reference.cache.max_len, reference.cache.max_batch
    backend = create_backend("tensorrt", reference.model, L, B, engine_dir=root)
    return reference, backend, root


@pytest.mark.gpu
def test_engines_are_cached_by_key(trt_fp16):
    from blockplan.backends.factory import create_backend
    from blockplan.backends.trt_build import ENGINE_SIDECAR

    reference, _, root = trt_fp16
    (folder,) = [p for p in root.iterdir() if (p / ENGINE_SIDECAR).is_file()]
    assert folder.name.endswith("fp16")
    stamp = (folder / ENGINE_SIDECAR).stat().st_mtime_ns
    L, B = reference.cache.max_len, reference.cache.max_batch
    create_backend("tensorrt", reference.model, L, B, engine_dir=root)
    assert (folder / ENGINE_SIDECAR).stat().st_mtime_ns == stamp  # cached, not rebuilt


@pytest.mark.gpu
def test_fp16_plans_run_and_agree_with_torch(trt_fp16):
    reference, backend, _ = trt_fp16
    trt_planner = Planner(
        reference.model, reference.tokenizer, reference.config, reference.schema, backend
    )
    obs = synthetic_observation(reference.config, 3)
    for strategy in ("ar", "scaffold_spec", "rollouts"):
        got = trt_planner.decode(obs, strategy)  # runs and parses strictly
        assert got.result.tokens.shape[1] == len(reference.scaffold)
    want = reference.decode(obs, "ar").result.tokens
    same = np.mean(trt_planner.decode(obs, "ar").result.tokens == want)
    assert same > 0.9  # fp16 may flip near-ties; most tokens agree


@pytest.mark.gpu
def test_cuda_graph_replay_equals_plain_execution(trt_fp16):
    import torch

    from blockplan.export.onnx_export import step_example

    reference, backend, _ = trt_fp16
    executor = backend.executor
    W, L = executor.windows[0], executor.max_len
    args = step_example(reference.model, W, L, batch=2)
    args = (torch.randn_like(args[0]), args[1], args[2], torch.randn_like(args[3]))
    first = executor.step(*args)  # plain execute_async_v3, then capture
    replayed = executor.step(*args)  # CUDA graph replay
    assert executor.contexts[(f"decoder_w{W}", 2)].graph is not None
    for a, b in zip(first, replayed, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.gpu
def test_int8_engines_build_and_plan(tmp_path):
    importorskip("tensorrt")
    from blockplan.backends.factory import create_backend

    reference = Planner.random_init("test", with_backend(PlannerConfig(), "torch"), seed=1)
    L, B = reference.cache.max_len, reference.cache.max_batch
    backend = create_backend(
        "tensorrt", reference.model, L, B, engine_dir=tmp_path, precision="int8"
    )
    trt_planner = Planner(
        reference.model, reference.tokenizer, reference.config, reference.schema, backend
    )
    plan = trt_planner.plan(synthetic_observation(reference.config, 0))
    assert plan.rollouts.shape[1:] == (5, 2)
