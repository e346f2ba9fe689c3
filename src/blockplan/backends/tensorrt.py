"""TensorRT executor (TensorRT 10.x name-based I/O, `execute_async_v3`, CUDA graphs).

Per engine and batch size (1 before the rollouts fork, N after) one execution context with
preallocated device buffers for every I/O tensor, bound once with `set_tensor_address`. A
step copies its inputs into the buffers, replays the context's CUDA graph (captured on the
first call of that context after one plain warm-up run; `torch.cuda.CUDAGraph`) or runs
`execute_async_v3`, and copies the outputs back to the caller's device. The engine's own
KV cache stays the engine's `KVCache` (on the CPU in the Planner today), so each step pays
a copy of the past K/V; a device-resident KVCache removes it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from blockplan.backends.base import BackendSetupError
from blockplan.backends.exports import matching_export
from blockplan.backends.step import StepBackend
from blockplan.backends.trt_build import (
    ENGINE_SIDECAR,
    build_engines,
    current_key,
    default_engine_root,
)
from blockplan.export.onnx_export import (
    STEP_INPUTS,
    STEP_OUTPUTS,
    read_sidecar,
    temporary_export,
)
from blockplan.model.planner_model import PlannerModel

log = logging.getLogger("blockplan.tensorrt")


class BoundContext:
    """One execution context at fixed shapes, its device buffers and its CUDA graph."""

    def __init__(self, engine, shapes: dict[str, tuple[int, ...]], stream, use_graph: bool):
        import tensorrt as trt

        self.context = engine.create_execution_context()
        self.stream = stream
        self.buffers: dict[str, torch.Tensor] = {}
        self.inputs: list[str] = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                self.context.set_input_shape(name, shapes[name])
                self.inputs.append(name)
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = _torch_dtype(engine.get_tensor_dtype(name))
            self.buffers[name] = torch.empty(shape, dtype=dtype, device="cuda")
            self.context.set_tensor_address(name, int(self.buffers[name].data_ptr()))
        self.use_graph = use_graph
        self.graph: torch.cuda.CUDAGraph | None = None
        self.num_runs = 0

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.cuda.stream(self.stream):
            for name in self.inputs:
                self.buffers[name].copy_(feeds[name], non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
            else:
                if not self.context.execute_async_v3(self.stream.cuda_stream):
                    raise RuntimeError("TensorRT execute_async_v3 failed")
                self.num_runs += 1
                if self.use_graph and self.num_runs == 1:
                    self.capture()
        self.stream.synchronize()
        return self.buffers

    def capture(self) -> None:
        """Record this context's launch into a CUDA graph (its buffers never move)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            ok = self.context.execute_async_v3(self.stream.cuda_stream)
        if not ok:
            raise RuntimeError("TensorRT execute_async_v3 failed during CUDA graph capture")
        self.graph = graph


class TrtExecutor:
    """`StepExecutor` over a folder of engines built by `build_engines`."""

    def __init__(self, folder: str | Path, expected_sha256: str, use_cuda_graph: bool = True):
        import tensorrt as trt

        folder = Path(folder)
        record = json.loads((folder / ENGINE_SIDECAR).read_text())
        if record["model_sha256"] != expected_sha256:
            raise ValueError(f"{folder}: engines of other weights ({record['model_sha256']})")
        self.windows = tuple(record["windows"])
        self.dynamic = False  # static engines, padded windows (StepBackend)
        self.max_len = int(record["max_len"])
        self.max_batch = int(record["max_batch"])
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engines = {}
        for name, entry in record["engines"].items():
            engine = self.runtime.deserialize_cuda_engine((folder / entry["file"]).read_bytes())
            if engine is None:  # built for another GPU / TensorRT, or a corrupt file
                raise RuntimeError(f"{folder / entry['file']}: TensorRT cannot deserialize it")
            self.engines[name] = engine
        self.stream = torch.cuda.Stream()
        self.use_cuda_graph = use_cuda_graph
        self.contexts: dict[tuple[str, int], BoundContext] = {}

    def bound(self, name: str, feeds: dict[str, torch.Tensor]) -> BoundContext:
        batch = next(iter(feeds.values())).shape[0] if name != "vision" else 1
        key = (name, batch)
        if key not in self.contexts:
            shapes = {n: tuple(t.shape) for n, t in feeds.items()}
            graph = self.use_cuda_graph and name != "vision"
            self.contexts[key] = BoundContext(self.engines[name], shapes, self.stream, graph)
        return self.contexts[key]

    def step(self, inputs_embeds, positions, attention_mask, past_kv):
        W, B = inputs_embeds.shape[1], inputs_embeds.shape[0]
        tensors = (inputs_embeds, positions, attention_mask, past_kv)
        feeds = dict(zip(STEP_INPUTS, tensors, strict=True))
        ctx = self.contexts.get((f"decoder_w{W}", B)) or self.bound(f"decoder_w{W}", feeds)
        out = ctx.run(feeds)
        device = inputs_embeds.device
        return tuple(out[n].to(device, copy=True) for n in STEP_OUTPUTS)

    def vision(self, image, camera_index, frame_index):
        feeds = {"image": image, "camera_index": camera_index, "frame_index": frame_index}
        out = self.bound("vision", feeds).run(feeds)
        return out["visual_tokens"].to(image.device, copy=True)


def tensorrt_backend(
    model: PlannerModel,
    sha: str,
    max_len: int,
    max_batch: int,
    folder: Path | None,
    engine_dir: Path | None,
    precision: str,
) -> StepBackend:
    """Engines for `model` from the cache (`engine_dir`, default `default_engine_root()`),
    built first from the model folder's export — or a fresh one — where missing."""
    if not torch.cuda.is_available():
        raise BackendSetupError("model.backend='tensorrt': no CUDA device here")
    try:
        import tensorrt  # noqa: F401
    except ImportError as e:
        raise BackendSetupError("model.backend='tensorrt': tensorrt is not installed") from e
    root = Path(engine_dir) if engine_dir is not None else default_engine_root()
    cached = root / current_key(sha, precision)
    if not (cached / ENGINE_SIDECAR).is_file():
        onnx_dir = matching_export(folder, sha, max_len)
        # an ONNX-Runtime-only export (the dynamic step, no static window) cannot build
        if onnx_dir is not None and read_sidecar(onnx_dir).get("windows"):
            build_engines(onnx_dir, root, precision)
        else:
            tmp, _ = temporary_export(model, max_len, max_batch)
            with tmp:
                build_engines(tmp.name, root, precision)
        log.info("built TensorRT engines in %s", cached)
    return StepBackend("tensorrt", model, TrtExecutor(cached, sha))


def _torch_dtype(trt_dtype) -> torch.dtype:
    import tensorrt as trt

    table = {
        trt.float32: torch.float32,
        trt.float16: torch.float16,
        trt.int64: torch.int64,
        trt.int32: torch.int32,
        trt.bool: torch.bool,
    }
    return table[trt_dtype]
