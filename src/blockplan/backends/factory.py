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

from blockplan.backends.base import Backend, BackendSetupError, TorchBackend
from blockplan.backends.exports import matching_export
from blockplan.backends.step import StepBackend
from blockplan.export.onnx_export import export_onnx, model_sha256
from blockplan.model.planner_model import PlannerModel
from blockplan.model.quantized import scheme_of

ORT_INT8 = "int8"  # export/ort_quant.py's sidecar mark (imported there with onnxruntime)


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
        onnx_dir = matching_export(folder, sha, max_len, batches, ort_quant)
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
