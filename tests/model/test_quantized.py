"""Quantized linears (INT8, FP8, W4): error bounds, the exact rotation, which linears, folders."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import ModelConfigError
from blockplan.model.pretrained import load_pretrained
from blockplan.model.quantized import (
    SCHEMES,
    QuantLinear,
    QuantSpec,
    quantizable_linears,
    random_signs,
    rotate_input,
    rotate_weight,
    scheme_of,
    w4_group,
)
from blockplan.model.weights import WeightsError, read_manifest

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "blockplan-tiny"


def _linear(out: int, inp: int, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    lin = nn.Linear(inp, out, bias=bias)
    with torch.no_grad():
        lin.weight[:, 3] *= 20.0  # an outlier input channel, as trained decoders have
    return lin


def test_the_w4_rotation_is_exact_in_float():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(7, 200, generator=gen, dtype=torch.float64)
    x = torch.randn(3, 5, 200, generator=gen, dtype=torch.float64)
    group = w4_group(200, 128)
    signs = random_signs(256, seed=4)
    rotated = F.linear(rotate_input(x, signs, group), rotate_weight(w, signs, group))
    assert group == 128
    assert torch.allclose(rotated, F.linear(x, w), atol=1e-12, rtol=0)
    # ... and it moves the weights: not the identity
    assert not torch.allclose(rotate_weight(w, signs, group)[:, :200], w)


def test_a_narrow_layer_gets_a_narrower_group():
    assert w4_group(32, 128) == 32 and w4_group(344, 128) == 128 and w4_group(100, 128) == 128


@pytest.mark.parametrize("scheme", SCHEMES)
def test_dequantized_weights_stay_within_the_scheme_bound(scheme):
    lin = _linear(24, 344)
    q = QuantLinear.of(lin, QuantSpec(scheme))
    w = lin.weight.detach().double()
    target = w if scheme != "w4" else rotate_weight(w, q.signs, q.group)
    error = (q.dequantized(torch.float64) - target).abs()
    assert (error <= q.error_bound(target) + 1e-7).all()
    assert error.max() > 0  # it did quantize
    # what the layer applies to x is its effective weight (w4: the rotation undone)
    x = torch.randn(4, 344, dtype=torch.float64)
    expected = F.linear(x, q.effective_weight(), lin.bias.detach().double())
    assert torch.allclose(q.to(torch.float64)(x), expected, atol=1e-9)


def test_codes_keep_their_dtype_when_the_model_is_cast():
    for scheme in SCHEMES:
        q = QuantLinear.of(_linear(8, 64), QuantSpec(scheme)).to(torch.bfloat16)
        assert q.qweight.dtype == {"int8": torch.int8, "fp8": torch.float8_e4m3fn}.get(
            scheme, torch.uint8
        )
        assert q.scales.dtype == torch.float32
        assert q(torch.randn(2, 64, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_w4_packs_two_codes_per_byte_with_group_scales():
    q = QuantLinear.of(_linear(16, 256, bias=False), QuantSpec("w4"))
    assert q.qweight.shape == (16, 128) and q.qweight.dtype == torch.uint8
    assert q.scales.shape == (16, 2)


def test_the_fp8_matmul_is_used_only_where_the_device_has_it(monkeypatch):
    from blockplan.model import quantized

    assert not quantized.fp8_matmul_supported(torch.zeros(2))  # a CPU tensor dequantizes
    fake = torch.zeros(2)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not quantized.fp8_matmul_supported(fake)  # Ampere: no fp8 tensor cores
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert quantized.fp8_matmul_supported(fake)


def test_a_bad_scheme_is_a_clear_error():
    with pytest.raises(ModelConfigError, match="scheme='int3'"):
        QuantSpec.from_dict({"scheme": "int3"})
    with pytest.raises(ModelConfigError, match="group_size"):
        QuantSpec.from_dict({"scheme": "w4", "group_size": 100})


# ---- folders -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def float_folder(tmp_path_factory):
    from blockplan.planner.planner import Planner

    torch.set_num_threads(1)
    planner = Planner.random_init("test", seed=3)
    folder = tmp_path_factory.mktemp("float") / "test"
    planner.model.save_pretrained(folder, tokenizer_json=planner.tokenizer.to_str())
    return folder


def _quantize(source: Path, out: Path, scheme: str, with_onnx: bool = False) -> dict:
    from blockplan.commands.quantize import write_quantized

    storage = "float16" if scheme == "w4" else "float32"
    return write_quantized(source, out, QuantSpec(scheme, float_storage=storage), with_onnx)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_quantized_folder_round_trips_and_plans(float_folder, tmp_path, scheme):
    from blockplan.config import PlannerConfig
    from blockplan.model.quantized_folder import quantized_copy
    from blockplan.planner.planner import Planner

    summary = _quantize(float_folder, tmp_path / scheme, scheme)
    assert summary["quantized_linears"] == 2 * 7 + 1  # the decoder layers' and the projector's
    config = json.loads((tmp_path / scheme / "config.json").read_text())
    assert config["quantization"]["scheme"] == scheme
    loaded = load_pretrained(tmp_path / scheme)
    assert scheme_of(loaded) == scheme
    # the loaded codes are the ones quantized in memory, bit for bit
    spec = QuantSpec(scheme, float_storage="float16" if scheme == "w4" else "float32")
    fresh = quantized_copy(load_pretrained(float_folder), spec)
    ours = dict(loaded.named_buffers())
    assert "visual.projector.2.qweight" in ours
    for name, buffer in fresh.named_buffers():
        assert torch.equal(ours[name].view(torch.uint8), buffer.view(torch.uint8)), name
    config = PlannerConfig().with_params({"model.backend": "torch"})
    planner = Planner.from_folder(tmp_path / scheme, config)
    assert planner.weights == "sha256-verified"
    plan = planner.plan(planner.format.synthetic(planner.config, 0))
    assert plan.rollouts.shape[1:] == (5, 2) and np.isfinite(plan.rollouts).all()


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shipped model is not in this tree")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_large_linear_is_quantized_within_its_bound(scheme):
    """The shipped architecture (random weights): the ego encoder's MLP and the vision tower's
    scene head and projector are quantized too, each within its scheme's bound; the LM head,
    the embeddings and the small linears stay float."""
    from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
    from blockplan.model.quantized_folder import quantized_copy

    torch.set_num_threads(1)
    torch.manual_seed(2)
    raw = json.loads((SHIPPED / "config.json").read_text())
    model = PlannerModel(PlannerModelConfig.from_dict(raw)).eval()
    names = {name for _, _, name in quantizable_linears(model, "linears")}
    assert {
        "ego_encoder.net.0",
        "ego_encoder.net.4",
        "visual.encoder.scene_head.0",
        "visual.projector.2",
        "model.layers.0.mlp.down_proj",
    } <= names
    assert not {"lm_head", "visual.encoder.scene_head.2", "visual.encoder.scene_embed"} & names
    assert {n for _, _, n in quantizable_linears(model, "decoder_linears")} < names
    quantized = quantized_copy(model, QuantSpec(scheme))
    source = dict(model.named_modules())
    for name, q in quantized.named_modules():
        if not isinstance(q, QuantLinear):
            continue
        w = source[name].weight.detach().double()
        target = w if scheme != "w4" else rotate_weight(w, q.signs, q.group)
        error = (q.dequantized(torch.float64) - target).abs()
        assert (error <= q.error_bound(target) + 1e-7).all(), name
    assert isinstance(quantized.decoder.lm_head, nn.Linear)
    assert quantized.decoder.lm_head.weight is quantized.decoder.model.embed_tokens.weight
    # the planner's encoders run on the quantized linears: close to float, not equal
    history = torch.randn(3, model.ego_encoder.config.rows, 6)
    kwargs = {"lane_pose": torch.zeros(3, 2), "scene": torch.zeros(3, 128), "lead": None}
    with torch.no_grad():
        ref = model.ego_encoder(history, **kwargs)
        got = quantized.ego_encoder(history, **kwargs)
    assert not torch.equal(ref, got)
    assert (got - ref).abs().max() <= 0.25 * ref.abs().max()


def test_a_folder_of_decoder_linears_only_still_loads(float_folder, tmp_path):
    """Folders written before the other linears were quantized: `modules: decoder_linears`
    (or no `modules` at all)."""
    from blockplan.commands.quantize import write_quantized
    from blockplan.model.weights import write_manifest

    out = tmp_path / "old"
    spec = QuantSpec("w4", float_storage="float16", modules="decoder_linears")
    assert write_quantized(float_folder, out, spec, False)["quantized_linears"] == 2 * 7
    raw = json.loads((out / "config.json").read_text())
    del raw["quantization"]["modules"]
    (out / "config.json").write_text(json.dumps(raw))
    write_manifest(out)
    loaded = load_pretrained(out)
    assert isinstance(loaded.visual.projector[2], nn.Linear)
    assert isinstance(loaded.decoder.model.layers[0].mlp.up_proj, QuantLinear)


def _rewrite(out: Path, edit) -> None:
    """Edit the folder's tensors, then re-sign it: a consistent, malformed folder."""
    from safetensors.torch import load_file, save_file

    from blockplan.model.weights import write_manifest

    tensors = load_file(str(out / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_manifest(out)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda t: t.pop("visual.projector.2.qweight"), "missing tensors"),
        (
            lambda t: t.update(
                {"visual.projector.2.qweight": torch.zeros(32, 8, dtype=torch.uint8)}
            ),
            "has shape",
        ),
        (
            lambda t: t.update(
                {"visual.projector.2.qweight": torch.zeros(32, 16, dtype=torch.int8)}
            ),
            "qweight is torch.int8",
        ),
        (lambda t: t["visual.projector.2.scales"].neg_(), "not finite and > 0"),
        (lambda t: t["visual.projector.2.scales"].fill_(float("nan")), "not finite and > 0"),
        (
            lambda t: t.update(
                {"visual.projector.2.scales": t["visual.projector.2.scales"].half()}
            ),
            "scales is torch.float16",
        ),
        (lambda t: t["visual.projector.2.signs"].fill_(3), "signs must be int8"),
        (lambda t: t.update({"visual.projector.2.weight": torch.zeros(32, 32)}), "unexpected"),
    ],
)
def test_malformed_quantized_entries_are_refused(float_folder, tmp_path, edit, match):
    out = tmp_path / "w4"
    _quantize(float_folder, out, "w4")
    _rewrite(out, edit)
    with pytest.raises(WeightsError, match=match):
        load_pretrained(out)


def test_the_manifest_covers_every_file(float_folder, tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "int8"
    _quantize(float_folder, out, "int8", with_onnx=True)
    listed = set(read_manifest(out))
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert listed == files - {"manifest.json"}
    assert "onnx/decoder_dynamic.onnx" in listed and "tokenizer.json" in listed


@pytest.mark.parametrize("what", ["weights", "config", "tokenizer"])
def test_a_tampered_quantized_folder_is_refused(float_folder, tmp_path, what):
    from blockplan.config import PlannerConfig
    from blockplan.planner.planner import Planner

    out = tmp_path / "w4"
    _quantize(float_folder, out, "w4")
    if what == "weights":
        data = bytearray((out / "model.safetensors").read_bytes())
        data[-5] ^= 0xFF
        (out / "model.safetensors").write_bytes(bytes(data))
    elif what == "config":
        raw = json.loads((out / "config.json").read_text())
        raw["quantization"]["scheme"] = "int8"
        (out / "config.json").write_text(json.dumps(raw))
    else:
        (out / "tokenizer.json").write_text("{}")
    with pytest.raises(WeightsError, match="does not match the manifest"):
        Planner.from_folder(out, PlannerConfig())


def test_a_scheme_or_shape_mismatch_is_a_clear_error(float_folder, tmp_path):
    from blockplan.model.weights import write_manifest

    out = tmp_path / "w4"
    _quantize(float_folder, out, "w4")
    raw = json.loads((out / "config.json").read_text())
    for change, error, match in (
        ({"scheme": "int4"}, ModelConfigError, "scheme='int4'"),
        ({"scheme": "fp8"}, WeightsError, "qweight is torch.uint8"),
        ({"group_size": 16}, WeightsError, "scales has shape"),  # other groups: other scales
    ):
        (out / "config.json").write_text(
            json.dumps(raw | {"quantization": raw["quantization"] | change})
        )
        write_manifest(out)  # a consistent, wrong folder: the loader itself must refuse it
        with pytest.raises(error, match=match):
            load_pretrained(out)


def test_the_ort_int8_export_loads_and_plans(float_folder, tmp_path):
    pytest.importorskip("onnxruntime")
    from blockplan.config import PlannerConfig
    from blockplan.planner.planner import Planner

    out = tmp_path / "int8"
    summary = _quantize(float_folder, out, "int8", with_onnx=True)
    assert summary["onnx_int8"]
    sidecar = json.loads((out / "onnx" / "export.json").read_text())
    assert sidecar["quantization"] == "int8"
    config = PlannerConfig().with_params({"model.backend": "onnxruntime"})
    planner = Planner.from_folder(out, config)
    assert planner.runner.name == "onnxruntime"
    assert Path(planner.runner.executor.dynamic_session._model_path).parent == out / "onnx"
    import onnx

    graph = onnx.load(str(out / "onnx" / "decoder_dynamic.onnx")).graph
    weights = {init.name for init in graph.initializer}
    assert sidecar["quantization_method"] == "blockwise"
    assert any(n.op_type == "MatMulNBits" for n in graph.node)
    # no weight matmul is left in float: only the attention's two-activation ones remain
    assert not [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    plan = planner.plan(planner.format.synthetic(planner.config, 0))
    assert plan.rollouts.shape[1:] == (5, 2) and np.isfinite(plan.rollouts).all()


@pytest.mark.slow
@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shipped model is not in this tree")
def test_the_shipped_model_quantized_mostly_agrees_with_float(tmp_path):
    from blockplan.bench.decoding import strategy_runner
    from blockplan.config import PlannerConfig
    from blockplan.planner.planner import Planner

    config = PlannerConfig().with_params({"model.backend": "torch"})
    float_planner = Planner.from_folder(SHIPPED, config)
    obs = [float_planner.format.synthetic(float_planner.config, i) for i in range(2)]
    reference = [strategy_runner(float_planner, "scaffold_spec")(o).tokens for o in obs]
    for scheme, floor in (("int8", 0.9), ("fp8", 0.85), ("w4", 0.8)):
        _quantize(SHIPPED, tmp_path / scheme, scheme)
        planner = Planner.from_folder(tmp_path / scheme, config)
        tokens = [strategy_runner(planner, "scaffold_spec")(o).tokens for o in obs]
        agreement = np.mean([np.mean(a == b) for a, b in zip(reference, tokens, strict=True)])
        assert agreement >= floor, (scheme, agreement)
        shutil.rmtree(tmp_path / scheme)


@pytest.mark.parametrize("name", ["../model.safetensors", "/etc/passwd", "a/b/c", "onnx/../x"])
def test_a_manifest_entry_outside_the_folder_is_refused(tmp_path, name):
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": {name: "0" * 64}}))
    with pytest.raises(WeightsError, match="names no file of the folder itself"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": {"onnx/x.onnx": "0" * 64}}))
    assert read_manifest(tmp_path) == {"onnx/x.onnx": "0" * 64}
