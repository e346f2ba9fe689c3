"""`create_backend`: the runner `config.model.backend` names, for one planner model.

Where the graphs come from: `onnxruntime` uses `<model folder>/onnx/` when it holds an
export of these exact weights (`export.json`'s `model_sha256`), and otherwise exports the
model's dynamic-shape graphs in-process into a temporary folder (a second or two for the
tiny model). `tensorrt`
loads (or builds, then caches) engines keyed by GPU, TensorRT version and weights
(`backends/tensorrt.py`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from blockplan.backends.base import Backend, TorchBackend
from blockplan.backends.step import StepBackend
from blockplan.errors import UserError
from blockplan.export.onnx_export import SIDECAR, VERSION, export_onnx, model_sha256
from blockplan.model.planner_model import PlannerModel
from blockplan.model.quantized import scheme_of

ORT_INT8 = "int8"  # export/ort_quant.py's sidecar mark (imported there with onnxruntime)

ONNX_SUBDIR = "onnx"


class BackendSetupError(UserError, ValueError):
    """The named backend cannot run here (missing package, GPU or graphs); says why."""


def create_backend(
    name: str,
    model: PlannerModel,
    max_len: int,
    max_batch: int,
    *,
    num_threads: int = 1,
    folder: Path | None = None,
    engine_dir: Path | None = None,
    precision: str = "fp16",
    cuda_graphs: bool = False,
) -> Backend:
    """The `name` backend for `model`, with KV caches of `max_len` slots and up to
    `max_batch` rows (`folder`: the model folder, searched for a matching export).
    `cuda_graphs`: the torch backend's bucketed forwards replayed as CUDA graphs
    (`backends/graphs.py`; the model must be on a CUDA device)."""
    if name == "torch" and cuda_graphs:
        from blockplan.backends.graphs import CudaGraphRunner, GraphBackend

        device = next(model.parameters()).device
        if device.type != "cuda":
            raise BackendSetupError(f"model.cuda_graphs=true: the model is on {device}, not CUDA")
        return GraphBackend(model, CudaGraphRunner(device))
    if name == "torch":
        return TorchBackend(model)
    sha = model_sha256(model)
    if name == "onnxruntime":
        from blockplan.backends.ort import OrtExecutor

        batches = (1, max_batch) if model.flow_head is not None else ()
        # an int8 model runs ORT's INT8 graph (export/ort_quant.py); fp8 / w4 their
        # dequantized weights in float32
        ort_quant = ORT_INT8 if scheme_of(model) == "int8" else None
        onnx_dir = _matching_export(folder, sha, max_len, batches, ort_quant)
        if onnx_dir is not None:
            return StepBackend(name, model, OrtExecutor(onnx_dir, sha, num_threads))
        with tempfile.TemporaryDirectory(prefix="blockplan-onnx-") as tmp:
            # the dynamic-shape step only: all ONNX Runtime runs (no static windows to build)
            export_onnx(model, tmp, max_len, max_batch, (), source="in-process")
            if ort_quant is not None:
                from blockplan.export.ort_quant import quantize_export

                quantize_export(tmp)
            return StepBackend(name, model, OrtExecutor(tmp, sha, num_threads))
    if name == "tensorrt":
        from blockplan.backends.tensorrt import tensorrt_backend

        return tensorrt_backend(model, sha, max_len, max_batch, folder, engine_dir, precision)
    raise BackendSetupError(f"model.backend={name!r}: must be torch, onnxruntime or tensorrt")


def _matching_export(
    folder: Path | None,
    sha: str,
    max_len: int,
    flow_batches: tuple[int, ...] = (),
    quantization: str | None = None,
) -> Path | None:
    import json

    if folder is None or not (folder / ONNX_SUBDIR / SIDECAR).is_file():
        return None
    sidecar = json.loads((folder / ONNX_SUBDIR / SIDECAR).read_text())
    if sidecar.get("model_sha256") != sha or sidecar.get("max_len") != max_len:
        return None
    if sidecar.get("version", 1) < VERSION:  # an older dynamic graph: export anew
        return None
    if sidecar.get("quantization") != quantization:  # float graphs for a float model only
        return None
    exported = set((sidecar.get("flow_head") or {}).get("batches", ()))
    if not set(flow_batches) <= exported:  # a flow head's graph for each batch it runs at
        return None
    return folder / ONNX_SUBDIR
