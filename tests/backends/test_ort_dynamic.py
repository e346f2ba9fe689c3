"""The dynamic-shape decoder step (`decoder_dynamic.onnx`) on ONNX Runtime, through
StepBackend's dynamic path: what every `onnxruntime` planner runs.

Against eager torch (the `torch` backend, the reference): single forwards at many
batch / past / window shapes and mask kinds (logits and the written K/V within 1e-4
absolute + 1e-4 relative: float32 ONNX Runtime kernels sum in another order than ATen's),
every strategy's tokens identical, one graph call per engine forward at its exact shape,
rollouts with a forked prefix at batch > 1 (and each rollout row the same as decoding it
alone), streaming configs (the ONNX planner falls back to full prefills, same tokens), the
legacy static-graph path, and broken export folders refused with the file named. The
shipped model folders run through this graph in tests/test_shipped_models.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from blockplan.config import MODEL_STRATEGIES, PlannerConfig
from blockplan.decoding.kv_cache import KVCache
from blockplan.export.onnx_export import (
    DYNAMIC_FILE,
    SIDECAR,
    ExportError,
    export_onnx,
    model_sha256,
)
from blockplan.model.masks import block_causal_mask, causal_mask, draft_mask, pipeline_mask
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from tests.backends.conftest import with_backend
from tests.optional import importorskip

importorskip("onnxruntime")
importorskip("onnx")

REPO_ROOT = Path(__file__).resolve().parents[2]
ATOL = RTOL = 1e-4  # float32 ORT vs ATen: the same arithmetic, another summation order


def ort_twin(reference: Planner, num_rollouts: int | None = None, runner=None) -> Planner:
    """The reference's weights on `onnxruntime` (exported in-process unless `runner`)."""
    n = reference.cache.max_batch if num_rollouts is None else num_rollouts
    config = with_backend(reference.config, "onnxruntime", n)
    return Planner(reference.model, reference.tokenizer, config, reference.schema, backend=runner)


@pytest.fixture(scope="module")
def planners():
    config = with_backend(PlannerConfig(), "torch", 4)
    reference = Planner.random_init("test", config, seed=5)
    return reference, ort_twin(reference)


@contextlib.contextmanager
def recorded_steps(executor):
    """Every dynamic-graph call's (inputs_embeds shape, past slots its mask reads)."""
    calls: list[tuple[tuple[int, ...], int]] = []
    step = executor.step_cached

    def spy(embeds, positions, mask, past, rows):
        calls.append((tuple(embeds.shape), mask.shape[2] - embeds.shape[1]))
        return step(embeds, positions, mask, past, rows)

    executor.step_cached = spy
    try:
        yield calls
    finally:
        executor.step_cached = step


def test_an_in_process_export_runs_the_dynamic_graph_alone(planners):
    _, ort = planners
    executor = ort.runner.executor
    assert ort.runner.name == "onnxruntime"
    assert executor.dynamic and executor.dynamic_session is not None
    assert executor.step_sessions == {} and executor.windows == ()  # nothing static built


def _mask(kind: str, batch: int, past: int, window: int) -> torch.Tensor:
    """(B, W, past + W) masks of every kind the engine sends."""
    if kind == "causal":
        m = causal_mask(window, past)
    elif kind == "draft":
        m = draft_mask(window, past)
    elif kind == "blocks":  # the full-diffusion recompute's block-causal answer
        prefix = causal_mask(past) if past else torch.zeros(0, 0, dtype=torch.bool)
        spans = [(0, window // 2), (window // 2, window)]
        m = block_causal_mask(prefix, spans)[past:]
    elif kind == "pipeline":  # a denoised block ahead of a token-causal one
        cut = max(1, window // 3)
        m = pipeline_mask(past, [(0, cut), (cut, window)], [True, False])
    else:  # "rows": every row of the batch its own visible past
        m = causal_mask(window, past).expand(batch, window, past + window).clone()
        for b in range(batch):
            m[b, :, : b * past // max(batch, 1)] = False
        return m
    return m.expand(batch, window, past + window)


SHAPES = [  # (batch, past, window, mask kind)
    (1, 0, 1, "causal"),
    (1, 0, 40, "causal"),
    (1, 1, 1, "causal"),
    (1, 37, 5, "draft"),
    (1, 120, 32, "draft"),
    (1, 120, 32, "causal"),
    (1, 90, 52, "pipeline"),
    (1, 0, 300, "blocks"),  # wider than any static window: one call all the same
    (1, 200, 64, "blocks"),
    (2, 60, 7, "draft"),
    (3, 150, 1, "causal"),
    (4, 150, 52, "causal"),
    (4, 150, 32, "rows"),
]


@pytest.mark.parametrize("batch,past,window,kind", SHAPES)
def test_a_forward_matches_torch_in_logits_and_cache(planners, batch, past, window, kind):
    reference, ort = planners
    c = reference.model.config.decoder
    L = reference.cache.max_len
    gen = torch.Generator().manual_seed(past * 7 + window)
    prefix = torch.randn(1, past, c.hidden_size, generator=gen)
    ids = torch.randint(0, c.vocab_size, (batch, window), generator=gen)
    positions = torch.arange(past, past + window) + (3 if kind == "draft" else 0)
    mask = _mask(kind, batch, past, window)
    rows = torch.tensor(sorted({0, window // 2, window - 1}))
    out, caches = [], []
    with recorded_steps(ort.runner.executor) as calls:
        for runner in (reference.runner, ort.runner):
            cache = KVCache.for_model(c, L, 4)
            if past:
                runner(inputs_embeds=prefix, cache=cache)  # a causal prefix, then shared
                cache.commit(past)
            cache.fork(batch)
            full = runner(ids, positions=positions, mask=mask, cache=cache)
            cache.num_pending = 0  # the same window again, asking for fewer logit rows
            picked = runner(ids, positions=positions, mask=mask, cache=cache, logit_rows=rows)
            cache.num_pending = 0
            last = runner(ids, positions=positions, mask=mask, cache=cache, num_logits=1)
            out.append((full, picked, last))
            caches.append(cache)
    expected = [((1, past, c.hidden_size), 0)] if past else []  # the prefix
    expected += [((batch, window, c.hidden_size), past)] * 3
    assert calls == expected  # one call per forward at its exact shape, the past only
    (want, want_rows, want_last), (got, got_rows, got_last) = out
    assert got.shape == (batch, window, c.vocab_size) and got_rows.shape[1] == len(rows)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got_rows, want[:, rows], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got_last, want[:, -1:], atol=ATOL, rtol=RTOL)
    n = past + window
    for name in ("kv", "raw_keys"):
        a, b = getattr(caches[0], name), getattr(caches[1], name)
        a, b = a[..., :batch, :, :n, :] if name == "kv" else a[:, :batch, :, :n], b
        b = b[..., :batch, :, :n, :] if name == "kv" else b[:, :batch, :, :n]
        torch.testing.assert_close(b, a, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(caches[1].positions, caches[0].positions, atol=0, rtol=0)


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_gives_torchs_tokens_in_one_call_per_forward(planners, strategy):
    reference, ort = planners
    for seed in (0, 3):
        obs = synthetic_observation(reference.config, seed)
        want = reference.decode(obs, strategy)
        with recorded_steps(ort.runner.executor) as calls:
            got = ort.decode(obs, strategy)
        np.testing.assert_array_equal(got.result.tokens, want.result.tokens, err_msg=str(seed))
        np.testing.assert_allclose(got.plan.rollouts, want.plan.rollouts, atol=1e-6)
        assert got.result.num_forwards == want.result.num_forwards
        assert len(calls) == got.result.num_forwards  # never chunked, never padded


def test_rollouts_fork_the_prefix_and_each_row_is_its_own_decode(planners):
    """N = 4 runs the trajectory at batch 4 against the forked prefix; row i has the tokens
    rollout i gets alone (batch-1 rows of the same streams) and torch's tokens."""
    reference, ort = planners
    obs = synthetic_observation(reference.config, 1)
    with recorded_steps(ort.runner.executor) as calls:
        four = ort.decode(obs, "rollouts").result
    assert four.tokens.shape[0] == 4
    np.testing.assert_array_equal(four.tokens, reference.decode(obs, "rollouts").result.tokens)
    batched = [(shape, past) for shape, past in calls if shape[0] == 4]
    fork_at = reference.prompt_len + reference.scaffold.section("trajectory").start
    assert batched and min(past for _, past in batched) >= fork_at
    assert [shape[0] for shape, _ in calls] == sorted(shape[0] for shape, _ in calls)
    one = ort_twin(reference, 1, runner=ort.runner).decode(obs, "rollouts").result
    np.testing.assert_array_equal(one.tokens[0], four.tokens[0])


def test_onnxruntime_streams_and_plans_the_torch_planners_tokens(tmp_path):
    """The dynamic graph writes pre-RoPE keys at any window and past, so an onnxruntime
    planner streams under `auto` like the torch one: the same tokens tick by tick as the
    torch planner and as full prefills on the same runner, the same frames reused. A legacy
    export of static windows only cannot stream: `on` is refused with the reason."""
    from blockplan.backends.step import StepBackend
    from blockplan.bench.stream_sequence import stream_observation
    from blockplan.planner.planner import PlannerSetupError

    config = with_backend(PlannerConfig(), "torch", 1)
    config = config.with_params({"frame_window.streaming": "auto"})
    torch_planner = Planner.random_init("test-stream", config, seed=2)
    assert torch_planner.streamer is not None  # an exactly streamable layout: auto streams
    ort = ort_twin(torch_planner)
    assert ort.streamer is not None and ort.vision_cache is not None
    full = ort_twin(torch_planner)
    full.streamer = full.vision_cache = None  # the same runner, full prefills
    for tick in range(3):
        obs = stream_observation(config, tick)
        want = torch_planner.decode(obs, "scaffold_spec").result.tokens
        np.testing.assert_array_equal(ort.decode(obs, "scaffold_spec").result.tokens, want)
        np.testing.assert_array_equal(full.decode(obs, "scaffold_spec").result.tokens, want)
    assert ort.streamer.stats.streamed == torch_planner.streamer.stats.streamed == 2
    assert ort.streamer.stats.frames_reused == torch_planner.streamer.stats.frames_reused > 0
    export_onnx(torch_planner.model, tmp_path, ort.cache.max_len, 1, (8, 64, 256), dynamic=False)
    static = StepBackend(
        "onnxruntime", torch_planner.model, _executor(tmp_path, torch_planner.model)
    )
    on = with_backend(config.with_params({"frame_window.streaming": "on"}), "onnxruntime", 1)
    with pytest.raises(PlannerSetupError, match="cannot stream"):
        Planner(
            torch_planner.model, torch_planner.tokenizer, on, torch_planner.schema, backend=static
        )


def test_an_older_export_is_exported_again_or_refused(planners, tmp_path):
    """A version-1 export (its dynamic graph takes the past K/V as one sliced input): a
    folder's onnx/ of that version is not used (the planner exports in-process), and an
    executor pointed at it directly says to re-export."""
    reference, _ = planners
    export_onnx(reference.model, tmp_path, reference.cache.max_len, 4, windows=())
    sidecar = json.loads((tmp_path / SIDECAR).read_text())
    (tmp_path / SIDECAR).write_text(json.dumps({**sidecar, "version": 1}))
    with pytest.raises(ExportError, match="version 1.*re-export"):
        _executor(tmp_path, reference.model)


@pytest.fixture(scope="module")
def export_folder(planners, tmp_path_factory):
    """A model folder-style export of the reference's weights: static windows + dynamic."""
    reference, _ = planners
    folder = tmp_path_factory.mktemp("export")
    export_onnx(reference.model, folder, reference.cache.max_len, 4, windows=(8, 64, 256))
    return folder


def _copy(folder, tmp_path):
    copy = tmp_path / "onnx"
    shutil.copytree(folder, copy)
    return copy


def _executor(folder, model):
    from blockplan.backends.ort import OrtExecutor

    return OrtExecutor(folder, model_sha256(model))


def test_a_folder_export_runs_dynamic_and_its_static_graphs_stay_for_tensorrt(
    planners, export_folder
):
    from blockplan.backends.trt_build import engine_graphs

    reference, _ = planners
    sidecar = json.loads((export_folder / SIDECAR).read_text())
    assert sidecar["windows"] == [8, 64, 256]
    assert {"decoder_w8", "decoder_w64", "decoder_w256"} <= set(sidecar["graphs"])
    assert sidecar["dynamic"]["decoder"]["file"] == DYNAMIC_FILE
    # TensorRT builds the vision and static window graphs, never the dynamic one
    assert set(engine_graphs(sidecar)) == {"vision", "decoder_w8", "decoder_w64", "decoder_w256"}
    executor = _executor(export_folder, reference.model)
    assert executor.dynamic and executor.step_sessions == {}  # ORT loads the dynamic alone
    only_dynamic = {**sidecar, "windows": [], "graphs": {"vision": sidecar["graphs"]["vision"]}}
    with pytest.raises(ExportError, match="no static decoder window"):
        engine_graphs(only_dynamic)  # an ONNX-Runtime-only export never reaches TensorRT


def test_a_legacy_static_export_still_plans_the_same_tokens(planners, tmp_path):
    """An export without the dynamic graph (written before it existed) runs padded."""
    from blockplan.backends.step import StepBackend

    reference, _ = planners
    export_onnx(reference.model, tmp_path, reference.cache.max_len, 4, (8, 64, 256), dynamic=False)
    executor = _executor(tmp_path, reference.model)
    assert not executor.dynamic and set(executor.step_sessions) == {8, 64, 256}
    static = ort_twin(reference, runner=StepBackend("onnxruntime", reference.model, executor))
    obs = synthetic_observation(reference.config, 4)
    for strategy in ("scaffold_spec", "rollouts"):
        want = reference.decode(obs, strategy).result.tokens
        np.testing.assert_array_equal(static.decode(obs, strategy).result.tokens, want)


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_tampered_or_missing_dynamic_graph_is_refused_by_name(
    planners, export_folder, tmp_path, damage
):
    reference, _ = planners
    copy = _copy(export_folder, tmp_path)
    graph = copy / DYNAMIC_FILE
    if damage == "changed":
        data = bytearray(graph.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte in the weights
        graph.write_bytes(bytes(data))
    else:
        graph.unlink()
    with pytest.raises(ExportError, match="decoder_dynamic.onnx.*missing or changed"):
        _executor(copy, reference.model)


def test_a_tampered_folder_export_fails_the_planner_and_the_cli_with_the_file_named(
    tmp_path, capsys
):
    """A model folder (the shipped one) whose onnx/ holds these weights' export with a
    damaged dynamic graph: no planner loads it, and `blockplan bench` says which file."""
    from blockplan.cli import main

    shipped = REPO_ROOT / "models" / "blockplan-tiny"
    if not (shipped / "config.json").is_file():
        pytest.skip("models/blockplan-tiny is not in this checkout")
    folder = tmp_path / "model"
    shutil.copytree(shipped, folder)
    config = with_backend(PlannerConfig(), "torch", 1)
    planner = Planner.from_folder(folder, config)
    export_onnx(planner.model, folder / "onnx", planner.cache.max_len, 4, windows=())
    (folder / "onnx" / DYNAMIC_FILE).write_bytes(b"not a graph")
    with pytest.raises(ExportError, match=DYNAMIC_FILE):
        Planner.from_folder(folder, with_backend(config, "onnxruntime", 1))
    args = [
        "bench",
        "--model",
        str(folder),
        "--backend",
        "onnxruntime",
        "--strategies",
        "ar",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--no-hf",
        "--no-compute-floor",
    ]
    assert main(args) != 0
    assert DYNAMIC_FILE in capsys.readouterr().err


def test_an_export_with_neither_dynamic_nor_static_decoder_is_refused(
    planners, export_folder, tmp_path
):
    reference, _ = planners
    copy = _copy(export_folder, tmp_path)
    sidecar = json.loads((copy / SIDECAR).read_text())
    del sidecar["dynamic"]
    sidecar["windows"] = []
    sidecar["graphs"] = {"vision": sidecar["graphs"]["vision"]}
    (copy / SIDECAR).write_text(json.dumps(sidecar))
    with pytest.raises(ExportError, match="no decoder graph"):
        _executor(copy, reference.model)


def test_float64_planners_run_the_float32_graph_with_the_same_tokens():
    """The graphs are float32: a float64 planner's onnxruntime twin casts in and out and
    still decodes the float64 torch planner's tokens."""
    config = with_backend(PlannerConfig(), "torch", 1)
    config = config.with_params({"model.dtype": "float64"})
    reference = Planner.random_init("test", config, seed=8)
    ort = ort_twin(reference)
    obs = synthetic_observation(reference.config, 0)
    for strategy in ("ar", "scaffold_spec"):
        got = ort.decode(obs, strategy)
        assert got.plan.rollouts.dtype == reference.decode(obs, strategy).plan.rollouts.dtype
        want = reference.decode(obs, strategy).result.tokens
        np.testing.assert_array_equal(got.result.tokens, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_planners_decode_on_onnxruntime_as_ar_greedy(dtype):
    """A half-precision planner's onnxruntime twin gets its logits in the model dtype (numpy
    holds no bfloat16): the engine's in-place numpy shortcuts must step aside, and every
    strategy still decodes; greedy spec equals greedy AR on the same twin."""
    config = with_backend(PlannerConfig(), "torch", 2).with_params({"model.dtype": dtype})
    ort = ort_twin(Planner.random_init("test", config, seed=9))
    obs = synthetic_observation(ort.config, 0)
    want = ort.decode(obs, "ar").result.tokens
    np.testing.assert_array_equal(ort.decode(obs, "scaffold_spec").result.tokens, want)
    for strategy in MODEL_STRATEGIES:
        assert ort.decode(obs, strategy).result.tokens.shape[1] == want.shape[1]


def test_a_position_outside_the_rope_table_is_a_clear_error(planners):
    """The dynamic graph rotates with a table of positions [0, rope_rows) (the sidecar's
    `dynamic.decoder.rope_rows`): a position outside it is refused by name, never read
    out of bounds (or, negative, wrapped around)."""
    _, ort = planners
    limit = ort.runner.executor.rope_rows
    assert limit >= ort.cache.max_len
    c = ort.model.config.decoder
    cache = KVCache.for_model(c, ort.cache.max_len, 1)
    ids = torch.randint(0, c.vocab_size, (1, 2))
    for positions in (torch.tensor([limit - 1, limit]), torch.tensor([-1, 0])):
        with pytest.raises(ValueError, match="RoPE table"):
            ort.runner(ids, positions=positions, mask=causal_mask(2), cache=cache)
