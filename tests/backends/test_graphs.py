"""The static-shape decode of `model.cuda_graphs` (backends/graphs.py).

On the CPU its whole path runs without capture (`DirectRunner`): bucketing, padding, the
mask / position / write-slot tensors and the writes into the preallocated cache. Every
strategy must give the eager torch backend's tokens, in float32 and float64, on the tiny
presets and on every shipped model folder; forwards outside the buckets fall back and are
counted. The capture and replay themselves (`CudaGraphRunner`) need CUDA: those tests carry
the `gpu` mark and skip here (tests/conftest.py).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from blockplan.backends import create_backend
from blockplan.backends.factory import BackendSetupError
from blockplan.backends.graphs import (
    SPARE_SLOTS,
    DirectRunner,
    GraphBackend,
    bucket_batches,
    bucket_widths,
)
from blockplan.bench.stream_sequence import stream_observation
from blockplan.config import MODEL_STRATEGIES, ConfigError, PlannerConfig, load_config
from blockplan.decoding.kv_cache import KVCache
from blockplan.export.onnx_export import DEFAULT_WINDOWS
from blockplan.model.masks import causal_mask, draft_mask
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from blockplan.ros.params import parameter_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(p for p in (REPO_ROOT / "models").glob("*") if (p / "config.json").is_file())
DTYPES = ("float32", "float64")
needs_cuda = pytest.mark.gpu  # tests/conftest.py skips it without CUDA


def configured(config: PlannerConfig, dtype: str, num_rollouts: int = 3, **model) -> PlannerConfig:
    """`config` in `dtype`, one thread, N rollouts, a short full diffusion (it runs eagerly
    either way: it keeps no cache)."""
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, dtype=dtype, num_threads=1, **model),
        rollouts=dataclasses.replace(config.rollouts, num_rollouts=num_rollouts),
        decoding=dataclasses.replace(config.decoding, max_denoise_steps=4),
    )


def static_twin(planner: Planner, **kwargs) -> Planner:
    """The same model, tokenizer, schema and config on the static path without capture."""
    backend = GraphBackend(planner.model, DirectRunner(), **kwargs)
    return Planner(planner.model, planner.tokenizer, planner.config, planner.schema, backend)


def assert_same_plans(eager: Planner, static: Planner, observations, strategies) -> None:
    for strategy in strategies:
        for i, obs in enumerate(observations):
            a, b = eager.decode(obs, strategy), static.decode(obs, strategy)
            np.testing.assert_array_equal(
                b.result.tokens, a.result.tokens, err_msg=f"{strategy}, observation {i}"
            )
            assert b.result.num_forwards == a.result.num_forwards
    stats = static.runner.stats
    cached = [s for s in strategies if s != "full_diffusion"]
    assert stats.static > 0 or not cached  # the buckets did the decoding, not the fallback
    if "full_diffusion" in strategies:
        assert stats.eager["no_cache"] > 0  # it keeps no cache: eager, and counted


# ---- buckets ---------------------------------------------------------------------------------


def test_buckets_are_the_export_windows():
    assert bucket_widths(10_000) == tuple(sorted(DEFAULT_WINDOWS))
    assert bucket_widths(40) == (8, 16, 32, 48)  # up to the first window holding the cache
    assert bucket_widths(40, (4, 64)) == (4, 64)
    assert bucket_batches(1) == (1,) and bucket_batches(4) == (1, 4)


# ---- every strategy, static ≡ eager ----------------------------------------------------------


@pytest.fixture(scope="module", params=DTYPES)
def test_preset_pair(request):
    eager = Planner.random_init("test", configured(PlannerConfig(), request.param), seed=7)
    return eager, static_twin(eager)


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_on_the_test_preset(test_preset_pair, strategy):
    eager, static = test_preset_pair
    assert_same_plans(eager, static, [synthetic_observation(eager.config, 5)], [strategy])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_strategy_on_the_tiny_preset(dtype):
    eager = Planner.random_init("tiny", configured(PlannerConfig(), dtype), seed=2)
    static = static_twin(eager)
    assert_same_plans(eager, static, [synthetic_observation(eager.config, 1)], MODEL_STRATEGIES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_robot_strategies(dtype):
    from blockplan.planner.embodiment import ROBOT_BENCH_STRATEGIES, robot_config

    eager = Planner.random_init("robot-test", configured(robot_config(), dtype), seed=2)
    static = static_twin(eager)
    observations = [eager.format.synthetic(eager.config, 0)]
    assert_same_plans(eager, static, observations, ROBOT_BENCH_STRATEGIES)


def test_streamed_prefill_runs_in_buckets():
    config = configured(PlannerConfig(), "float64")
    eager = Planner.random_init("test-stream", config, seed=4)
    static = static_twin(eager)
    assert static.streamer is not None  # the static backend is the torch backend to it
    for tick in range(3):
        obs = stream_observation(config, tick)
        a, b = eager.decode(obs, "scaffold_spec"), static.decode(obs, "scaffold_spec")
        np.testing.assert_array_equal(b.result.tokens, a.result.tokens, err_msg=f"tick {tick}")
    assert static.streamer.stats.streamed == 2


@pytest.mark.slow
def test_qwen_planner_answer_windows_in_buckets():
    from blockplan.planner.qwen import fastddrive_config

    config = configured(fastddrive_config(), "float64")
    eager = Planner.random_init("qwen2.5-vl-test", config, seed=1)
    static = static_twin(eager)
    assert_same_plans(eager, static, [synthetic_observation(config, 0)], ["rollouts"])
    # the prompt's multimodal positions run eagerly: one prefill per plan
    assert static.runner.stats.eager == {"mrope_positions": 1}


@pytest.mark.skipif(not MODELS, reason="no model folder in models/")
@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
@pytest.mark.parametrize("folder", MODELS, ids=[p.name for p in MODELS])
def test_every_strategy_on_the_shipped_models(folder, dtype):
    from blockplan.model.weights import read_config

    is_robot = read_config(folder).get("embodiment") == "robot"  # params/robot.yaml's folders
    params = REPO_ROOT / "params" / ("robot.yaml" if is_robot else "planner.yaml")
    config = configured(load_config(params), dtype)
    eager = Planner.from_folder(folder, config)
    static = static_twin(eager)
    if is_robot:
        from blockplan.planner.synthetic import synthetic_robot_observation

        obs = synthetic_robot_observation(config, 3, eager.schema)
    else:
        obs = synthetic_observation(config, 3)
    assert_same_plans(eager, static, [obs], MODEL_STRATEGIES)


# ---- the bookkeeping -------------------------------------------------------------------------


def _decoder_and_caches(max_batch: int = 1, spare: int = SPARE_SLOTS):
    planner = Planner.random_init("test", configured(PlannerConfig(), "float64"), seed=1)
    c = planner.model.config.decoder
    caches = [KVCache.for_model(c, 40, max_batch, torch.float64, spare_slots=s) for s in (0, spare)]
    return planner, caches


@torch.no_grad()
def test_a_static_forward_writes_what_eager_writes():
    planner, (eager_cache, static_cache) = _decoder_and_caches()
    static = GraphBackend(planner.model, DirectRunner())
    torch.manual_seed(0)
    c = planner.model.config.decoder
    x = torch.randn(1, 11, c.hidden_size, dtype=torch.float64)
    for cache in (eager_cache, static_cache):
        cache.reset()
    a = planner.runner(inputs_embeds=x, mask=causal_mask(11), cache=eager_cache)
    b = static(inputs_embeds=x, mask=causal_mask(11), cache=static_cache)  # bucket 16: 5 pads
    torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    eager_cache.commit(11)
    static_cache.commit(11)
    ids = torch.tensor([[3, 4, 5]])
    a = planner.runner(
        ids, positions=torch.arange(11, 14), mask=draft_mask(3, 11), cache=eager_cache
    )
    b = static(ids, positions=torch.arange(11, 14), mask=draft_mask(3, 11), cache=static_cache)
    torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    assert static_cache.num_pending == eager_cache.num_pending == 3
    for name in ("kv", "raw_keys"):
        ours, theirs = getattr(static_cache, name), getattr(eager_cache, name)
        torch.testing.assert_close(ours[..., :14, :], theirs[..., :14, :], rtol=1e-12, atol=1e-12)
        assert not ours[..., 14:40, :].any()  # nothing after the new tokens: pads went spare
    assert torch.equal(static_cache.positions[:, :14], eager_cache.positions[:, :14])
    assert static.stats.static == 2 and static.stats.by_width == {16: 1, 8: 1}


@torch.no_grad()
def test_out_of_bucket_forwards_fall_back_and_are_counted():
    planner, (plain, cache) = _decoder_and_caches(max_batch=4)
    static = GraphBackend(planner.model, DirectRunner(), windows=(8,))
    ids = torch.tensor([[3] * 12])
    cache.reset()
    c, f64 = planner.model.config.decoder, torch.float64
    want = planner.runner(ids, cache=KVCache.for_model(c, 40, 1, f64))
    got = static(ids, cache=cache)  # 12 tokens > the widest window (8)
    torch.testing.assert_close(got, want)
    static(ids[:, :5], cache=plain)  # a cache without a spare slot
    static(ids[:, :5])  # no cache at all
    cache.reset()
    static(ids[:, :5], cache=cache)  # in a bucket
    cache.commit(5)
    cache.fork(2)
    static(torch.tensor([[3], [4]]), cache=cache)  # batch 2: buckets are 1 and 4
    with torch.enable_grad():
        static(ids[:, :5], cache=KVCache.for_model(c, 40, 1, f64, spare_slots=1))
    assert dict(static.stats.eager) == {
        "wider_than_buckets": 1,
        "no_spare_slot": 1,
        "no_cache": 1,
        "batch_not_bucketed": 1,
        "autograd": 1,
    }
    assert static.stats.static == 1
    report = static.stats.as_dict()
    assert report["static_forwards_by_window"] == {"8": 1} and report["graphs_captured"] == 0


def test_the_planner_gives_a_static_runner_a_spare_slot_and_makes_its_buckets():
    eager = Planner.random_init("test", configured(PlannerConfig(), "float32"), seed=1)
    static = static_twin(eager)
    assert eager.cache.spare_slots == 0 and static.cache.spare_slots == SPARE_SLOTS
    assert static.cache.kv.shape[4] == static.cache.max_len + SPARE_SLOTS
    buckets = static.runner.steps[static.cache]
    assert set(buckets) == {(b, w) for b in (1, 3) for w in bucket_widths(static.cache.max_len)}


# ---- configuration ---------------------------------------------------------------------------


def test_cuda_graphs_on_the_cpu_is_a_config_error():
    with pytest.raises(ConfigError, match=r"model.cuda_graphs=True: needs model.backend=torch"):
        PlannerConfig().with_params({"model.cuda_graphs": True})
    with pytest.raises(ConfigError, match="model.cuda_graphs"):
        load_config(REPO_ROOT / "params" / "planner.yaml", overrides=["model.cuda_graphs=true"])
    with pytest.raises(ConfigError, match="model.cuda_graphs.*backend=onnxruntime"):
        PlannerConfig().with_params({"model.backend": "onnxruntime", "model.cuda_graphs": True})
    ok = PlannerConfig().with_params({"model.device": "cuda:0", "model.cuda_graphs": True})
    assert ok.model.cuda_graphs is True  # valid; the planner then needs the device
    assert PlannerConfig().model.cuda_graphs is False


def test_cuda_graphs_is_a_read_only_ros_parameter():
    spec = {s.name: s for s in parameter_specs()}["model.cuda_graphs"]
    assert spec.type == "bool" and spec.default is False and spec.read_only


def test_the_factory_refuses_graphs_for_a_cpu_model():
    planner = Planner.random_init("test", configured(PlannerConfig(), "float32"), seed=1)
    with pytest.raises(BackendSetupError, match="not CUDA"):
        create_backend("torch", planner.model, 40, 1, cuda_graphs=True)


# ---- on a GPU: capture and replay ------------------------------------------------------------


def _on_cuda(planner: Planner, cuda_graphs: bool) -> Planner:
    config = planner.config.with_params({"model.device": "cuda", "model.cuda_graphs": cuda_graphs})
    return Planner(copy.deepcopy(planner.model), planner.tokenizer, config, planner.schema)


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_replayed_graphs_equal_eager(dtype):
    base = Planner.random_init("test", configured(PlannerConfig(), dtype), seed=3)
    eager, graphs = _on_cuda(base, False), _on_cuda(base, True)
    assert isinstance(graphs.runner, GraphBackend) and graphs.runner.runner.capture
    captured = graphs.runner.stats.captured
    assert captured == len(bucket_batches(3)) * len(bucket_widths(graphs.cache.max_len))
    observations = [synthetic_observation(base.config, seed) for seed in range(2)]
    assert_same_plans(eager, graphs, observations, MODEL_STRATEGIES)
    assert graphs.runner.stats.captured == captured  # replayed, never captured again


@needs_cuda
def test_gpu_graphs_equal_the_cpu_static_path():
    base = Planner.random_init("test", configured(PlannerConfig(), "float64"), seed=3)
    cpu, graphs = static_twin(base), _on_cuda(base, True)
    assert_same_plans(cpu, graphs, [synthetic_observation(base.config, 0)], MODEL_STRATEGIES)


@needs_cuda
def test_gpu_qwen_graphs_equal_eager():
    from blockplan.planner.qwen import fastddrive_config

    config = configured(fastddrive_config(), "float64")
    base = Planner.random_init("qwen2.5-vl-test", config, seed=1)
    eager, graphs = _on_cuda(base, False), _on_cuda(base, True)
    obs = synthetic_observation(config, 0)
    assert_same_plans(eager, graphs, [obs], ["ar", "scaffold_spec", "rollouts"])


def test_a_flow_head_model_decodes_its_text_in_buckets():
    eager = Planner.random_init("test-flow", configured(PlannerConfig(), "float64"), seed=2)
    static = static_twin(eager)
    assert static.flow is not None
    obs = synthetic_observation(eager.config, 0)
    a, b = eager.decode(obs, "scaffold_spec"), static.decode(obs, "scaffold_spec")
    np.testing.assert_array_equal(b.result.tokens, a.result.tokens)
    np.testing.assert_allclose(b.plan.rollouts, a.plan.rollouts, rtol=1e-9, atol=1e-9)
    assert static.runner.stats.static > 0
