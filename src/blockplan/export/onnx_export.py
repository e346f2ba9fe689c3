"""Write a planner model as ONNX graphs with static shapes, plus a JSON sidecar.

An export folder holds `vision.onnx` (one frame), one `decoder_w{W}.onnx` per window size W
(the same `DecoderStep` graph at several static widths), `decoder_dynamic.onnx` (the decoder
step with symbolic batch, window and past, written node by node by `export/ort_step.py`: it
reads the engine's whole cache buffer and computes only the logit rows asked for; what ONNX
Runtime runs, `DYNAMIC_FILE`), for a
flow-head model one `flow_b{B}.onnx` per batch size (B = 1 and `max_batch`: one plan and
the rollouts; the head's velocity over the prefix K/V padded to L slots,
docs/ALGORITHMS.md §7.1) and `export.json`:

    {"format": "blockplan-onnx", "version": 2, "opset": 17, "model_sha256": "...", "max_len": L,
     "max_batch": B, "windows": [8, 32, 96, 256], "graphs": {name: {file, sha256, inputs,
     outputs}}, ...}

(plus `"dynamic": {"decoder": {file, sha256, inputs, outputs}}` for the dynamic graph).

Static shapes: W and L are fixed per graph; only the batch is symbolic (1 before the
rollouts fork, N after — padding the batch would multiply every prefill by N). Shorter
windows are padded to the next exported W (see `backends/step.py`): pad tokens get zero
embeddings, position 0 and a mask row that sees only itself, their outputs are dropped.
The dynamic graph needs none of that: L is the past actually cached, W the forward's own.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockplan.errors import UserError
from blockplan.export.graphs import DecoderStep, VisionFrame
from blockplan.export.ort_step import build_step_graph, rope_rows
from blockplan.model.planner_model import PlannerModel
from blockplan.model.quantized import dequantize_model, scheme_of

FORMAT = "blockplan-onnx"
# 2: the dynamic decoder graph reads the whole cache buffer and takes logit rows
# (`export/ort_step.py`); version-1 folders carry the older dynamic graph and are re-exported.
VERSION = 2
SIDECAR = "export.json"
VISION_FILE = "vision.onnx"
DEFAULT_WINDOWS = (8, 16, 32, 48, 64, 96, 256)
DEFAULT_OPSET = 17
VISION_INPUTS = ("image", "camera_index", "frame_index")
VISION_OUTPUTS = ("visual_tokens",)
STEP_INPUTS = ("inputs_embeds", "positions", "attention_mask", "past_kv")
STEP_OUTPUTS = ("logits", "new_kv", "new_raw_keys")
FLOW_INPUTS = ("x", "tau", "keys", "values", "key_mask")
FLOW_OUTPUTS = ("velocity",)


class ExportError(UserError, ValueError):
    """An export folder is missing, malformed or made from other weights; names the file."""


def decoder_file(window: int) -> str:
    return f"decoder_w{window}.onnx"


# The decoder step with symbolic batch, window and past (`dynamic.decoder` in the sidecar):
# one call per forward at its exact shape, no padding, attention over the past slots only.
# ONNX Runtime runs it; TensorRT builds its engines from the static `graphs` only.
DYNAMIC_FILE = "decoder_dynamic.onnx"


def model_sha256(model: PlannerModel) -> str:
    """SHA-256 of the weights in float32 (names, shapes and bytes in name order): the key
    that ties an export, and the engines built from it, to these exact weights."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.folder_state().items()):
        t = tensor.detach().to(torch.float32).contiguous().cpu()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def step_example(model: PlannerModel, window: int, max_len: int, batch: int = 1):
    """Example inputs (the shapes the graph is traced at) of the decoder step."""
    c = model.config.decoder
    n, hkv, d = c.num_hidden_layers, c.num_key_value_heads, c.dim_per_head
    mask = torch.zeros(batch, window, max_len + window, dtype=torch.bool)
    mask[:, :, max_len:] = torch.ones(window, window, dtype=torch.bool).tril()
    return (
        torch.zeros(batch, window, c.hidden_size),  # inputs_embeds (B, W, Hd)
        torch.arange(window).expand(batch, window).contiguous(),  # positions (B, W)
        mask,  # attention_mask (B, W, L + W)
        torch.zeros(n, 2, batch, hkv, max_len, d),  # past_kv (N, 2, B, Hkv, L, D)
    )


def flow_file(batch: int) -> str:
    return f"flow_b{batch}.onnx"


def flow_batches(max_batch: int) -> tuple[int, ...]:
    """The batch sizes a flow head is exported at: one plan, and the rollouts."""
    return tuple(sorted({1, max_batch}))


def flow_example(model: PlannerModel, max_len: int, batch: int):
    """Example inputs of the flow head's velocity graph (prefix padded to `max_len`)."""
    c = model.config.decoder
    R = len(model.flow_head.layer_indices)
    kv = torch.zeros(R, batch, c.num_key_value_heads, max_len, c.dim_per_head)
    mask = torch.zeros(batch, max_len, dtype=torch.bool)
    mask[:, : max_len // 2] = True
    return torch.zeros(batch, 5, 2), torch.zeros(batch), kv, kv.clone(), mask


def vision_example(model: PlannerModel):
    v = model.config.vision
    return (
        torch.zeros(1, 3, v.image_height, v.image_width),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1, dtype=torch.long),
    )


def _export(module, args, path: Path, inputs, outputs, opset: int, dynamic=None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and trace notes
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,  # the TorchScript exporter: no onnxscript needed
            input_names=list(inputs),
            output_names=list(outputs),
            opset_version=opset,
            dynamic_axes=dynamic,
            do_constant_folding=True,
        )


def _shapes(names: Sequence[str], tensors: Sequence[torch.Tensor], batch_dims: dict) -> dict:
    out = {}
    for name, t in zip(names, tensors, strict=True):
        shape: list[Any] = list(t.shape)
        for axis in batch_dims.get(name, ()):
            shape[axis] = "batch"
        out[name] = {"shape": shape, "dtype": str(t.dtype).removeprefix("torch.")}
    return out


@torch.no_grad()
def export_onnx(
    model: PlannerModel,
    out: str | Path,
    max_len: int,
    max_batch: int,
    windows: Sequence[int] = DEFAULT_WINDOWS,
    opset: int = DEFAULT_OPSET,
    check: bool = True,
    source: str = "",
    dynamic: bool = True,
) -> dict[str, Any]:
    """Export `model` (float32) into folder `out`; return the sidecar (also written).
    `dynamic`: also the dynamic-shape decoder step (`DYNAMIC_FILE`); then `windows` may be
    empty (an export for ONNX Runtime only)."""
    import onnx

    windows = tuple(sorted(set(int(w) for w in windows)))
    if (not windows and not dynamic) or (windows and windows[0] < 1):
        raise ExportError(f"windows={list(windows)}: need sizes >= 1")
    if max_len < 1 or max_batch < 1:
        raise ExportError(f"max_len={max_len}, max_batch={max_batch}: must be >= 1")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    sha = model_sha256(model)  # of the weights as loaded (a quantized model's codes)
    if scheme_of(model) is not None:  # the graphs carry the dequantized weights, in float
        model = copy.deepcopy(model)
        dequantize_model(model)
    if model.decoder.lm_head.weight.dtype != torch.float32:
        model = copy.deepcopy(model).to(torch.float32)  # never change the caller's model
    model = model.eval()
    graphs: dict[str, Any] = {}

    vision = VisionFrame(model.visual).eval()
    args = vision_example(model)
    _export(vision, args, folder / VISION_FILE, VISION_INPUTS, VISION_OUTPUTS, opset)
    graphs["vision"] = {
        "file": VISION_FILE,
        "inputs": _shapes(VISION_INPUTS, args, {}),
        "outputs": _shapes(VISION_OUTPUTS, (vision(*args),), {}),
    }
    step = DecoderStep(model.decoder).eval()
    batch_axes = {"inputs_embeds": (0,), "positions": (0,), "attention_mask": (0,)}
    batch_axes |= {"past_kv": (2,), "logits": (0,), "new_kv": (2,), "new_raw_keys": (1,)}
    batch_only = {name: {axis: "batch" for axis in axes} for name, axes in batch_axes.items()}
    for w in windows:
        args = step_example(model, w, max_len)
        name = decoder_file(w)
        _export(step, args, folder / name, STEP_INPUTS, STEP_OUTPUTS, opset, batch_only)
        graphs[f"decoder_w{w}"] = {
            "file": name,
            "window": w,
            "inputs": _shapes(STEP_INPUTS, args, batch_axes),
            "outputs": _shapes(STEP_OUTPUTS, step(*args), batch_axes),
        }
    if model.flow_head is not None:
        head = model.flow_head.eval()
        for b in flow_batches(max_batch):
            args = flow_example(model, max_len, b)
            name = flow_file(b)
            _export(head, args, folder / name, FLOW_INPUTS, FLOW_OUTPUTS, opset)
            graphs[f"flow_b{b}"] = {
                "file": name,
                "batch": b,
                "inputs": _shapes(FLOW_INPUTS, args, {}),
                "outputs": _shapes(FLOW_OUTPUTS, (head(*args),), {}),
            }
    extra: dict[str, Any] = {}
    if dynamic:
        graph = build_step_graph(model.decoder, max_len, opset)
        onnx.save(graph, str(folder / DYNAMIC_FILE))
        extra["decoder"] = {
            "file": DYNAMIC_FILE,
            "inputs": _value_infos(graph.graph.input),
            "outputs": _value_infos(graph.graph.output),
            "rope_rows": rope_rows(model.decoder, max_len),  # positions it can rotate
        }
    for entry in (*graphs.values(), *extra.values()):
        path = folder / entry["file"]
        if check:
            onnx.checker.check_model(str(path), full_check=True)
        entry["sha256"] = file_sha256(path)
    c = model.config.decoder
    sidecar = {
        "format": FORMAT,
        "version": VERSION,
        "source": source,
        "model_sha256": sha,
        "opset": opset,
        "onnx_version": onnx.__version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "max_len": max_len,
        "max_batch": max_batch,
        "windows": list(windows),
        "decoder": {
            "num_layers": c.num_hidden_layers,
            "num_kv_heads": c.num_key_value_heads,
            "head_dim": c.dim_per_head,
            "hidden_size": c.hidden_size,
            "vocab_size": c.vocab_size,
        },
        "flow_head": None
        if model.flow_head is None
        else {
            "batches": list(flow_batches(max_batch)),
            "read_layers": list(model.flow_head.layer_indices),
        },
        "vision": {
            "cameras": list(model.config.camera_names),
            "frames": model.config.num_frames,
            "tokens_per_image": model.config.tokens_per_image,
        },
        "padding": (
            "a window of n <= W tokens runs in the smallest exported W >= n: pad rows get "
            "zero embeddings, position 0 and attend only to themselves; their logits and K/V "
            "are dropped. Longer inputs run in chunks of at most max(W) that never attend "
            "ahead of the chunk (prefill chunks end on frame boundaries)."
        ),
        "graphs": graphs,
    }
    if extra:
        sidecar["dynamic"] = extra
    (folder / SIDECAR).write_text(json.dumps(sidecar, indent=2) + "\n")
    return sidecar


def _value_infos(values) -> dict:
    """{name: {shape (symbolic axes by name), dtype}} of a graph's inputs or outputs."""
    from onnx import helper

    out = {}
    for v in values:
        dims = v.type.tensor_type.shape.dim
        shape = [d.dim_param or d.dim_value for d in dims]
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        out[v.name] = {"shape": shape, "dtype": "bool" if dtype == np.dtype(bool) else str(dtype)}
    return out


def read_sidecar(folder: str | Path, expected_sha256: str | None = None) -> dict[str, Any]:
    """The sidecar of an export folder, with every graph's file present and unchanged (and
    the weights' sha256 equal to `expected_sha256` when given)."""
    folder = Path(folder)
    path = folder / SIDECAR
    if not path.is_file():
        raise ExportError(f"{path}: missing; run `blockplan export` first")
    sidecar = json.loads(path.read_text())
    if sidecar.get("format") != FORMAT:
        raise ExportError(f"{path}: format={sidecar.get('format')!r}, expected {FORMAT!r}")
    if expected_sha256 is not None and sidecar["model_sha256"] != expected_sha256:
        raise ExportError(
            f"{path}: model_sha256={sidecar['model_sha256'][:12]}…, the loaded weights are "
            f"{expected_sha256[:12]}…; re-export"
        )
    for name, entry in (*sidecar["graphs"].items(), *sidecar.get("dynamic", {}).items()):
        file = folder / entry["file"]
        if not file.is_file() or file_sha256(file) != entry["sha256"]:
            raise ExportError(f"{file}: graph {name!r} missing or changed since export")
    return sidecar


def temporary_export(model: PlannerModel, max_len: int, max_batch: int, **kwargs):
    """Export into a fresh temporary folder; returns (TemporaryDirectory, sidecar)."""
    tmp = tempfile.TemporaryDirectory(prefix="blockplan-onnx-")
    return tmp, export_onnx(model, tmp.name, max_len, max_batch, **kwargs)
