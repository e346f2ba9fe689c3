"""The exported graphs: checker-valid, static shapes, a sidecar, and the same numbers as the
model (the eager-attention step graph against the torch decoder with a KVCache)."""

from __future__ import annotations

import json

import pytest
import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.export.graphs import (
    CachedDecoderStep,
    DecoderStep,
    VisionFrame,
    adaptive_pool_matrix,
)
from blockplan.export.onnx_export import (
    DYNAMIC_FILE,
    ExportError,
    export_onnx,
    model_sha256,
    read_sidecar,
    step_example,
)
from blockplan.model.masks import causal_mask, draft_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.model.presets import preset_config
from tests.optional import importorskip

onnx = importorskip("onnx")
ort = importorskip("onnxruntime")


def small_model(seed: int = 0) -> PlannerModel:
    torch.manual_seed(seed)
    config = preset_config("test", 40, ("front", "rear"), 2)
    return PlannerModel(config).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = small_model()
    folder = tmp_path_factory.mktemp("onnx")
    sidecar = export_onnx(model, folder, max_len=24, max_batch=3, windows=(4, 8))
    return model, folder, sidecar


def test_adaptive_pool_matrix_matches_torch():
    x = torch.randn(2, 3, 9, 16)
    pooled = torch.einsum(
        "gh,nchw,kw->ncgk", adaptive_pool_matrix(9, 4), x, adaptive_pool_matrix(16, 4)
    )
    torch.testing.assert_close(pooled, torch.nn.AdaptiveAvgPool2d((4, 4))(x))


def test_vision_frame_matches_the_tower():
    model = small_model()
    v = model.config.vision
    images = torch.randn(4, 3, v.image_height, v.image_width)  # 2 cameras x 2 frames
    batch = model.visual(images)
    frame = VisionFrame(model.visual)
    for i in range(4):
        one = frame(images[i : i + 1], torch.tensor([i // 2]), torch.tensor([i % 2]))
        torch.testing.assert_close(one[0], batch[i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("is_draft", [False, True])
def test_decoder_step_matches_decoder_with_cache(is_draft):
    model = small_model(1)
    c = model.config.decoder
    torch.manual_seed(2)
    L, W, past, n = 20, 8, 6, 5
    cache = KVCache.for_model(c, L)
    model.decoder(inputs_embeds=torch.randn(1, past, c.hidden_size), cache=cache)
    cache.commit(past)
    x = torch.randn(1, n, c.hidden_size)
    build = draft_mask if is_draft else causal_mask
    mask = build(n, past)
    positions = torch.arange(past, past + n)
    expected = model.decoder(inputs_embeds=x, positions=positions, mask=mask, cache=cache)
    # The same window through the step graph: padded to W, keys after the L cache slots.
    embeds = torch.zeros(1, W, c.hidden_size)
    embeds[:, :n] = x
    pos = torch.zeros(1, W, dtype=torch.long)
    pos[0, :n] = positions
    gm = torch.zeros(1, W, L + W, dtype=torch.bool)
    gm[0, :n, :past] = mask[:, :past]
    gm[0, :n, L : L + n] = mask[:, past:]
    gm[0, torch.arange(n, W), L + torch.arange(n, W)] = True
    past_kv = cache.kv.clone()
    past_kv[:, :, :, :, past:] = 0.0  # the pending slots are the step's own outputs
    logits, new_kv, new_raw = DecoderStep(model.decoder)(embeds, pos, gm, past_kv)
    torch.testing.assert_close(logits[:, :n], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new_kv[:, :, :, :, :n], cache.kv[:, :, :, :, past : past + n])
    torch.testing.assert_close(new_raw[:, :, :, :n], cache.raw_keys[:, :, :, past : past + n])


def test_export_writes_checked_static_graphs_and_a_sidecar(exported):
    model, folder, sidecar = exported
    on_disk = json.loads((folder / "export.json").read_text())
    assert on_disk == sidecar
    assert sidecar["model_sha256"] == model_sha256(model)
    assert sidecar["opset"] == 17 and sidecar["windows"] == [4, 8]
    assert set(sidecar["graphs"]) == {"vision", "decoder_w4", "decoder_w8"}
    step = sidecar["graphs"]["decoder_w8"]
    assert step["inputs"]["attention_mask"]["shape"] == ["batch", 8, 24 + 8]
    assert step["inputs"]["past_kv"]["shape"] == [2, 2, "batch", 2, 24, 8]
    assert step["outputs"]["new_raw_keys"]["shape"] == [2, "batch", 2, 8, 8]
    for entry in sidecar["graphs"].values():
        graph = onnx.load(str(folder / entry["file"]))
        onnx.checker.check_model(graph)
        for value in graph.graph.input:
            dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
            assert all(d == "batch" or (isinstance(d, int) and d > 0) for d in dims), dims
    assert read_sidecar(folder, model_sha256(model))["max_len"] == 24


def test_onnx_step_matches_torch_step_at_batch_one_and_three(exported):
    model, folder, _ = exported
    session = ort.InferenceSession(str(folder / "decoder_w8.onnx"))
    step = DecoderStep(model.decoder)
    for batch in (1, 3):
        args = step_example(model, 8, 24, batch)
        args = (torch.randn_like(args[0]), args[1], args[2], torch.randn_like(args[3]))
        names = ("inputs_embeds", "positions", "attention_mask", "past_kv")
        got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})
        with torch.no_grad():
            want = step(*args)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(torch.from_numpy(g), w, atol=1e-4, rtol=1e-4)


def test_the_dynamic_step_graph_runs_any_window_past_and_batch(exported):
    """`decoder_dynamic.onnx` (written node by node, export/ort_step.py): symbolic batch,
    window and past, the cache read in place; `CachedDecoderStep`'s numbers at each shape,
    whatever the cache holds beyond the past (those slots are never attended to)."""
    model, folder, sidecar = exported
    entry = sidecar["dynamic"]["decoder"]
    assert entry["file"] == DYNAMIC_FILE
    c = model.config.decoder
    hkv, d = c.num_key_value_heads, c.dim_per_head
    assert entry["inputs"]["past_k_0"]["shape"] == ["batch", hkv, "slots", d]
    assert entry["inputs"]["attention_mask"]["shape"] == ["batch", "window", "keys"]
    assert entry["outputs"]["logits"]["shape"] == ["batch", "picked", c.vocab_size]
    session = ort.InferenceSession(str(folder / DYNAMIC_FILE))
    step = CachedDecoderStep(model.decoder)
    gen = torch.Generator().manual_seed(0)
    for batch, window, past, slots in ((1, 1, 0, 24), (1, 5, 9, 9), (3, 11, 13, 24), (2, 24, 0, 3)):
        mask = torch.rand(batch, window, past + window, generator=gen) < 0.7
        mask[:, :, past:] = causal_mask(window)  # every row sees itself
        cached = tuple(
            torch.randn(batch, hkv, slots, d, generator=gen) * 30  # large: a leak would show
            for _ in range(2 * c.num_hidden_layers)
        )
        rows = torch.tensor(sorted({0, window // 2, window - 1}))
        args = (
            torch.randn(batch, window, c.hidden_size, generator=gen),
            torch.arange(past, past + window).expand(batch, window).contiguous(),
            mask,
            cached,
            rows,
        )
        names = ("inputs_embeds", "positions", "attention_mask")
        feeds = {n: a.numpy() for n, a in zip(names, args[:3], strict=True)}
        feeds["logit_rows"] = rows.numpy()
        for i in range(c.num_hidden_layers):
            feeds[f"past_k_{i}"], feeds[f"past_v_{i}"] = (
                cached[2 * i].numpy(),
                cached[2 * i + 1].numpy(),
            )
        got = session.run(None, feeds)
        with torch.no_grad():
            want = step(*args)
        assert got[0].shape == (batch, len(rows), c.vocab_size)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(torch.from_numpy(g), w, atol=1e-4, rtol=1e-4)


def test_an_export_for_onnx_runtime_only_needs_no_static_window(tmp_path):
    model = small_model()
    sidecar = export_onnx(model, tmp_path, max_len=24, max_batch=2, windows=())
    assert sidecar["windows"] == [] and set(sidecar["graphs"]) == {"vision"}
    assert read_sidecar(tmp_path)["dynamic"]["decoder"]["file"] == DYNAMIC_FILE
    with pytest.raises(ExportError, match="windows"):
        export_onnx(model, tmp_path / "none", max_len=24, max_batch=2, windows=(), dynamic=False)


def test_read_sidecar_refuses_other_weights_and_changed_graphs(exported, tmp_path):
    model, folder, _ = exported
    with pytest.raises(ExportError, match="model_sha256"):
        read_sidecar(folder, model_sha256(small_model(7)))
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "vision.onnx").write_bytes(b"changed")
    with pytest.raises(ExportError, match="vision"):
        read_sidecar(copy)
    with pytest.raises(ExportError, match="missing"):
        read_sidecar(tmp_path / "nowhere")


def test_vision_frame_matches_the_tower_with_keypoints():
    import dataclasses

    torch.manual_seed(3)
    config = preset_config("test", 40, ("front", "rear"), 2)
    vision = dataclasses.replace(config.vision, keypoints=3)
    model = PlannerModel(dataclasses.replace(config, vision=vision)).eval()
    images = torch.randn(4, 3, vision.image_height, vision.image_width)
    batch = model.visual(images)
    assert batch.shape[1] == vision.grid[0] * vision.grid[1] + 1
    frame = VisionFrame(model.visual)
    for i in range(4):
        one = frame(images[i : i + 1], torch.tensor([i // 2]), torch.tensor([i % 2]))
        torch.testing.assert_close(one[0], batch[i], atol=1e-5, rtol=1e-5)
