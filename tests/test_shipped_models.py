"""Every shipped model folder (models/*/config.json) through export, onnxruntime, streaming and
the bench — a folder added to models/ is covered without touching this file.

Default suite, per folder: `blockplan export --model` (two decoder windows), onnxruntime plans
identical to torch on the export's dynamic-shape step (scaffold spec and rollouts, logits
within 1e-3), streaming equal to a full prefill where the layout streams exactly (and
off under `auto` where it does not), `blockplan bench --model`. Slow, per folder: every
decoding strategy on onnxruntime identical to torch and the logits within 1e-3.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from blockplan.cli import main
from blockplan.config import MODEL_STRATEGIES, PlannerConfig, default_params_path, load_config
from blockplan.model.weights import read_config
from tests.optional import importorskip

REPO_ROOT = Path(__file__).resolve().parents[1]
# Vehicle folders; the robot ones (`embodiment: robot`) are tests/test_shipped_robot_models.py's.
MODELS = sorted(
    p
    for p in (REPO_ROOT / "models").glob("*")
    if (p / "config.json").is_file() and read_config(p).get("embodiment", "vehicle") != "robot"
)
OURS = "blockplan_planner"  # the model_type `blockplan export` and onnxruntime handle

pytestmark = pytest.mark.skipif(not MODELS, reason="no model folder in models/")
every_folder = pytest.mark.parametrize("folder", MODELS, ids=[p.name for p in MODELS])


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shipped_config(backend: str = "torch", num_rollouts: int = 4) -> PlannerConfig:
    """The shipped params with one thread (and the backend / rollouts a test needs)."""
    config = load_config(default_params_path())
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, backend=backend, num_threads=1),
        rollouts=dataclasses.replace(config.rollouts, num_rollouts=num_rollouts),
    )


def needs_export(folder: Path) -> None:
    model_type = read_config(folder).get("model_type")
    if model_type != OURS:
        pytest.skip(f"{folder.name}: model_type {model_type!r} runs on the torch backend only")


def exported_copy(folder: Path, tmp: Path, windows: str) -> Path:
    """A copy of `folder` with `blockplan export --model` written to its onnx/ (where the
    onnxruntime backend looks for graphs of these weights)."""
    copy = tmp / folder.name
    shutil.copytree(folder, copy)
    args = ["export", "--model", str(folder), "--out", str(copy / "onnx"), "--windows", windows]
    assert main(args) == 0
    return copy


@every_folder
def test_export_and_onnxruntime_plans_equal_torch(folder, tmp_path, capsys):
    importorskip("onnxruntime")
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation

    needs_export(folder)
    copy = exported_copy(folder, tmp_path, "8,256")
    summary = json.loads(capsys.readouterr().out)
    assert summary["out"] == str(copy / "onnx")
    from tests.backends.test_ort_dynamic import recorded_steps
    from tests.backends.test_ort_parity import max_logit_gap

    reference = Planner.from_folder(folder, shipped_config("torch"))
    ort = Planner.from_folder(copy, shipped_config("onnxruntime"))
    assert ort.runner.name == "onnxruntime"
    # the folder's own export, its dynamic-shape step (the static windows are TensorRT's)
    executor = ort.runner.executor
    assert executor.dynamic and executor.step_sessions == {}
    assert max_logit_gap(reference, ort, seed=0) <= 1e-3
    for seed, strategy in ((0, "scaffold_spec"), (1, "scaffold_spec"), (1, "rollouts")):
        obs = synthetic_observation(reference.config, seed)
        want = reference.decode(obs, strategy)
        with recorded_steps(executor) as calls:
            got = ort.decode(obs, strategy)
        np.testing.assert_array_equal(got.result.tokens, want.result.tokens)
        np.testing.assert_allclose(got.plan.rollouts, want.plan.rollouts)
        assert len(calls) == got.result.num_forwards  # one exact-shape call per forward


@every_folder
def test_streaming_equals_a_full_prefill_where_the_layout_allows(folder):
    from blockplan.bench.stream_sequence import stream_observation
    from blockplan.bench.streaming import prefill_logits, twin_planners
    from blockplan.planner.planner import Planner

    config = shipped_config()
    planner = Planner.from_folder(folder, config)
    exact = getattr(planner.model.config, "streams_exactly", False)
    if not exact:  # `auto` must not stream a layout whose K/V depend on the slot
        assert config.frame_window.streaming != "auto" or planner.streamer is None
        pytest.skip(f"{folder.name}: the layout does not stream exactly")
    assert planner.streamer is not None  # `auto` streams it
    stream, full = twin_planners(planner)
    for tick in range(4):
        obs = stream_observation(config, tick)
        a, _ = prefill_logits(stream, obs)
        b, _ = prefill_logits(full, obs)
        assert (a - b).abs().max() <= 1e-4, f"tick {tick}"
    stream.reset_stream()
    for tick in range(4):
        obs = stream_observation(config, tick)
        got = stream.decode(obs, "scaffold_spec")
        if tick in (0, 3):
            want = full.decode(obs, "scaffold_spec")
            np.testing.assert_array_equal(got.result.tokens, want.result.tokens)
    stats = stream.streamer.stats  # two passes of 4 ticks, a reset between them
    assert stats.streamed == 6 and stats.full_prefills == {"first": 1, "reset": 1}


@every_folder
def test_bench_runs_on_the_folder(folder, tmp_path, capsys):
    report = tmp_path / "bench.json"
    args = [
        "bench",
        "--model",
        str(folder),
        "--strategies",
        "scaffold_spec",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--no-hf",
        "--threads",
        "1",
        "--json",
        str(report),
    ]
    assert main(args) == 0
    doc = json.loads(report.read_text())
    row = doc["strategies"]["scaffold_spec"]
    assert row["valid_fraction"] == 1.0  # the plan parsed
    assert doc["stage_ms_p50"]["scaffold_spec"]["prefill"] > 0


@pytest.mark.slow
@every_folder
def test_every_strategy_on_onnxruntime_equals_torch(folder, tmp_path, capsys):
    importorskip("onnxruntime")
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation
    from tests.backends.test_ort_parity import max_logit_gap

    needs_export(folder)
    copy = exported_copy(folder, tmp_path, "8,16,32,48,64,96,256")
    reference = Planner.from_folder(folder, shipped_config("torch", 3))
    ort = Planner.from_folder(copy, shipped_config("onnxruntime", 3))
    assert max_logit_gap(reference, ort, seed=0) <= 1e-3
    obs = synthetic_observation(reference.config, 2)
    for strategy in MODEL_STRATEGIES:
        want = reference.decode(obs, strategy)
        got = ort.decode(obs, strategy)
        np.testing.assert_array_equal(got.result.tokens, want.result.tokens, err_msg=strategy)
