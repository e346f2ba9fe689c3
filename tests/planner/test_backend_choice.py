"""`model.backend: auto` (the shipped default): onnxruntime for a float32 model of ours on a
CPU where it is installed, torch otherwise; and the decoding options the params set."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from blockplan.config import ConfigError, PlannerConfig, default_params_path, load_config
from blockplan.decoding.decode import DecodeOptions
from blockplan.planner.planner import Planner, resolve_backend

OURS = SimpleNamespace(exportable=True)
QWEN = SimpleNamespace(exportable=False)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


def test_auto_is_the_shipped_default():
    assert load_config(default_params_path()).model.backend == "auto"
    assert PlannerConfig().model.backend == "auto"


@pytest.mark.parametrize("name", ["torch", "onnxruntime", "tensorrt"])
def test_a_named_backend_is_used_as_named(name):
    assert resolve_backend(name, OURS, CPU, torch.float32) == name
    assert resolve_backend(name, QWEN, CUDA, torch.float64) == name


def test_auto_picks_onnxruntime_only_for_float32_models_of_ours_on_the_cpu():
    expected = "onnxruntime" if HAS_ORT else "torch"
    assert resolve_backend("auto", OURS, CPU, torch.float32) == expected
    assert resolve_backend("auto", OURS, CPU, torch.float64) == "torch"  # the graph is float32
    assert resolve_backend("auto", OURS, CUDA, torch.float32) == "torch"  # a GPU: torch
    assert resolve_backend("auto", QWEN, CPU, torch.float32) == "torch"  # not exportable


def test_auto_accepts_a_gpu_device_and_cuda_graphs():
    config = PlannerConfig().with_params({"model.device": "cuda", "model.cuda_graphs": True})
    assert config.model.backend == "auto"
    with pytest.raises(ConfigError, match="model.device"):
        PlannerConfig().with_params({"model.backend": "onnxruntime", "model.device": "cuda"})


@pytest.mark.skipif(not HAS_ORT, reason="needs onnxruntime (the export extra)")
def test_the_shipped_planner_runs_onnxruntime_and_streams():
    planner = Planner.from_folder("models/blockplan-tiny", load_config(default_params_path()))
    assert planner.runner.name == "onnxruntime" and planner.runner.streams
    assert planner.streaming_mode == "auto" and planner.streamer is not None


def test_rollouts_trajectory_decoding_and_spec_window_reach_the_options():
    config = PlannerConfig()
    assert config.rollouts.trajectory_decoding == "scaffold_spec"
    assert DecodeOptions.from_config(config, "rollouts").rollout_trajectory == "scaffold_spec"
    named = config.with_params({"rollouts.trajectory_decoding": "ar"})
    assert DecodeOptions.from_config(named, "rollouts").rollout_trajectory == "ar"
    assert DecodeOptions.from_config(config).spec_window == "adaptive"
    with pytest.raises(ConfigError, match="trajectory_decoding"):
        config.with_params({"rollouts.trajectory_decoding": "auto"})
    with pytest.raises(ConfigError, match="spec_window"):
        config.with_params({"decoding.spec_window": "wide"})
