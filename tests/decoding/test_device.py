"""`model.device`: a clear error where the device is absent; on a GPU, plans identical to the
CPU's token for token (float64, so no rounding difference can flip an argmax)."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.bench.stream_sequence import stream_observation
from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.decoding.device import DeviceError, resolve_device
from blockplan.model.qwen2_5_vl.config import qwen2_5_vl_3b
from blockplan.model.qwen2_5_vl.presets import with_depth
from blockplan.planner.planner import Planner, PlannerSetupError
from blockplan.planner.qwen import fastddrive_config
from blockplan.planner.synthetic import synthetic_observation
from tests.streaming.streaming_setup import SMALL, _one_thread  # noqa: F401

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.gpu  # tests/conftest.py skips it without CUDA
STRATEGIES = ("ar", "scaffold_spec", "section_diffusion", "full_diffusion", "rollouts", "pipelined")


def on(config: PlannerConfig, device: str, dtype: str = "float64") -> PlannerConfig:
    model = dataclasses.replace(config.model, device=device, dtype=dtype)
    return dataclasses.replace(config, model=model)


def twin_on(planner: Planner, device: str) -> Planner:
    """The same weights, tokenizer and schema on `device`."""
    config = on(planner.config, device, planner.config.model.dtype)
    return Planner(copy.deepcopy(planner.model), planner.tokenizer, config, planner.schema)


def test_cpu_resolves():
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_missing_gpu_is_a_clear_setup_error():
    with pytest.raises(DeviceError, match="no CUDA device here"):
        resolve_device("cuda")
    with pytest.raises(PlannerSetupError, match="model.device='cuda:1'"):
        Planner.random_init("test", on(PlannerConfig(), "cuda:1"))


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_bench_without_the_gpu_says_so(capsys):
    argv = ["bench", "--random-init", "test", "--device", "cuda", "--iters", "1", "--no-hf"]
    assert main(argv) == 1
    assert "no CUDA device here" in capsys.readouterr().err


def test_bench_layers_is_a_smoke_run_of_the_preset_width(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "qwen2.5-vl-test", "--layers", "1", "--no-hf"]
    argv += ["--strategies", "scaffold_spec", "--iters", "1", "--warmup", "0", "--threads", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["model"]["num_layers"] == 1 and "smoke run" in report["model"]["source"]
    assert report["model"]["device"] == "cpu"
    assert report["strategies"]["scaffold_spec"]["valid_fraction"] == 1.0
    capsys.readouterr()
    assert main(["bench", "--model", "x", "--layers", "2"]) == 2


def test_with_depth_keeps_widths_and_one_full_attention_block():
    full = qwen2_5_vl_3b(151936)
    short = with_depth(full, 2)
    assert short.decoder.num_hidden_layers == 2 and short.vision.depth == 2
    assert short.vision.fullatt_block_indexes == (1,)
    assert dataclasses.replace(short.decoder, num_hidden_layers=36) == full.decoder
    assert short.vision.hidden_size == full.vision.hidden_size


@needs_cuda
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gpu_plans_equal_cpu_plans(strategy):
    cpu = Planner.random_init("test", on(SMALL, "cpu"), seed=3)
    gpu = twin_on(cpu, "cuda")
    assert gpu.cache.kv.is_cuda and next(gpu.model.parameters()).is_cuda
    for seed in range(3):
        obs = synthetic_observation(SMALL, seed)
        a, b = cpu.decode(obs, strategy), gpu.decode(obs, strategy)
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)
        np.testing.assert_allclose(a.plan.rollouts, b.plan.rollouts)


@needs_cuda
def test_gpu_streaming_equals_cpu_full_prefill():
    cpu = Planner.random_init("test-stream", on(SMALL, "cpu"), seed=4)
    gpu = twin_on(cpu, "cuda")
    assert gpu.streamer is not None and gpu.vision_cache is not None
    for tick in range(6):
        obs = stream_observation(SMALL, tick)
        a, b = gpu.decode(obs, "rollouts"), cpu.decode(obs, "rollouts")
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)
    assert gpu.streamer.stats.streamed == 5


@needs_cuda
def test_gpu_qwen_planner_equals_cpu():
    config = on(fastddrive_config(), "cpu")
    cpu = Planner.random_init("qwen2.5-vl-test", config, seed=1)
    gpu = twin_on(cpu, "cuda")
    obs = synthetic_observation(config, 0)
    for strategy in ("ar", "scaffold_spec", "rollouts"):
        a, b = cpu.decode(obs, strategy), gpu.decode(obs, strategy)
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)


@needs_cuda
def test_gpu_robot_plans_equal_cpu_plans():
    from blockplan.planner.embodiment import robot_config

    config = on(robot_config(), "cpu")
    cpu = Planner.random_init("robot-test", config, seed=2)
    gpu = twin_on(cpu, "cuda")
    obs = cpu.format.synthetic(config, 0)
    for strategy in ("section_diffusion", "pipelined", "full_diffusion", "ar"):
        a, b = cpu.decode(obs, strategy), gpu.decode(obs, strategy)
        np.testing.assert_array_equal(a.result.tokens, b.result.tokens)
        np.testing.assert_allclose(a.plan.actions, b.plan.actions)
