"""Build TensorRT engines from an export folder (TensorRT 10.x API), cached by a key.

The cache key names what makes an engine valid: the GPU model, the TensorRT version, the
weights' sha256 (from `export.json`) and the precision. A folder per key holds
`vision.plan`, `decoder_w{W}.plan` and `engines.json`. Engines only run on the GPU and
TensorRT they were built with, which is why Docker images build them at first start.

Precisions: `fp16` (FP16 kernels allowed, I/O stays fp32), `int8` (INT8 kernels calibrated
by entropy calibration on recorded step inputs, FP16 fallback), `fp8` (FP8 + FP16 flags:
TensorRT runs FP8 only where the ONNX carries Q/DQ nodes, which our exporter does not insert
yet, so an fp8 build today runs FP16 kernels; the key keeps it apart all the same).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from blockplan.errors import UserError
from blockplan.export.onnx_export import ExportError, read_sidecar

PRECISIONS = ("fp16", "fp8", "int8")
ENGINE_SIDECAR = "engines.json"
WORKSPACE_BYTES = 1 << 30


class EngineBuildError(UserError, RuntimeError):
    """TensorRT could not parse or build a graph; carries the parser's errors."""


def engine_key(gpu_name: str, trt_version: str, model_sha256: str, precision: str) -> str:
    """A folder name: `<gpu>-trt<version>-<sha[:16]>-<precision>` (safe characters only)."""
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", gpu_name).strip("_")
    return f"{gpu}-trt{trt_version}-{model_sha256[:16]}-{precision}"


def current_key(model_sha256: str, precision: str) -> str:
    import tensorrt as trt

    return engine_key(torch.cuda.get_device_name(0), trt.__version__, model_sha256, precision)


def default_engine_root() -> Path:
    """Where engines are cached when no folder is given (the images mount /engines)."""
    return Path.home() / ".cache" / "blockplan" / "engines"


class StepCalibrator:
    """INT8 entropy calibration of one decoder-step graph from recorded inputs (each a dict
    name → CPU tensor at the graph's shape). Made a `trt.IInt8EntropyCalibrator2` lazily."""

    def __new__(cls, batches: Sequence[dict[str, torch.Tensor]]):
        import tensorrt as trt

        class _Calibrator(trt.IInt8EntropyCalibrator2):
            def __init__(self) -> None:
                trt.IInt8EntropyCalibrator2.__init__(self)
                self.batches, self.index, self.device = list(batches), 0, {}

            def get_batch_size(self) -> int:
                return 1

            def get_batch(self, names):
                if self.index >= len(self.batches):
                    return None
                batch = self.batches[self.index]
                self.index += 1
                self.device = {n: batch[n].cuda().contiguous() for n in names}
                return [int(self.device[n].data_ptr()) for n in names]

            def read_calibration_cache(self):
                return None

            def write_calibration_cache(self, cache) -> None:
                return None

        return _Calibrator()


def build_engine(
    onnx_path: Path,
    precision: str,
    profile_shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]],
    calibration: Sequence[dict[str, torch.Tensor]] = (),
) -> bytes:
    """Parse one ONNX graph and build a serialised engine. `profile_shapes`: input name →
    (min, opt, max) shapes of the optimisation profile (the batch range)."""
    import tensorrt as trt

    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: must be one of {list(PRECISIONS)}")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(f"{onnx_path}: TensorRT could not parse it: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    config.set_flag(trt.BuilderFlag.FP16)
    if precision == "fp8":
        config.set_flag(trt.BuilderFlag.FP8)
    if precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        if calibration:
            config.int8_calibrator = StepCalibrator(calibration)
    profile = builder.create_optimization_profile()
    for name, (lo, opt, hi) in profile_shapes.items():
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    if calibration and precision == "int8":
        config.set_calibration_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{onnx_path}: TensorRT failed to build a {precision} engine")
    return bytes(serialized)


def _profile(inputs: dict[str, Any], max_batch: int) -> dict[str, tuple]:
    """(min, opt, max) per input: the symbolic batch spans [1, max_batch], optimised for 1."""
    out = {}
    for name, spec in inputs.items():
        shape = spec["shape"]
        lo = tuple(1 if d == "batch" else d for d in shape)
        hi = tuple(max_batch if d == "batch" else d for d in shape)
        out[name] = (lo, lo, hi)
    return out


def engine_graphs(sidecar: dict) -> dict:
    """The graphs of an export that TensorRT builds engines of: the vision graph and the
    static decoder windows (`graphs`); the dynamic-shape step (`dynamic`) is ONNX Runtime's.
    An export without a static window cannot run on TensorRT: an `ExportError` says so."""
    if not sidecar.get("windows"):
        raise ExportError(
            "the export has no static decoder window (an ONNX-Runtime-only export); TensorRT "
            "needs `blockplan export --windows ...`"
        )
    return dict(sidecar["graphs"])


def build_engines(
    onnx_dir: str | Path,
    out_root: str | Path,
    precision: str,
    calibration: dict[int, Sequence[dict[str, torch.Tensor]]] | None = None,
    force: bool = False,
) -> Path:
    """Build (or find in the cache) every engine of an export folder; returns its folder
    `out_root/<key>`. `calibration`: recorded step inputs per window, for int8."""
    import tensorrt as trt

    sidecar = read_sidecar(onnx_dir)
    key = current_key(sidecar["model_sha256"], precision)
    folder = Path(out_root) / key
    done = folder / ENGINE_SIDECAR
    if done.is_file() and not force:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    max_batch = int(sidecar["max_batch"])
    engines = {}
    for name, graph in engine_graphs(sidecar).items():
        window = graph.get("window")
        batches = (calibration or {}).get(window, ()) if window else ()
        plan = build_engine(
            Path(onnx_dir) / graph["file"],
            precision,
            _profile(graph["inputs"], max_batch),
            batches,
        )
        file = Path(graph["file"]).with_suffix(".plan").name
        (folder / file).write_bytes(plan)
        engines[name] = {"file": file, "window": window}
    record = {
        "key": key,
        "gpu": torch.cuda.get_device_name(0),
        "tensorrt_version": trt.__version__,
        "precision": precision,
        "model_sha256": sidecar["model_sha256"],
        "max_len": sidecar["max_len"],
        "max_batch": max_batch,
        "windows": sidecar["windows"],
        "engines": engines,
    }
    done.write_text(json.dumps(record, indent=2) + "\n")  # written last: marks it complete
    return folder
