"""`model.*`: which model folder runs, on which backend and device."""

from __future__ import annotations

import re
from dataclasses import dataclass

from blockplan.config.fields import MAX_THREADS, _check, _check_fields, choice

BACKENDS = ("auto", "torch", "onnxruntime", "tensorrt")
DTYPES = ("float32", "float64", "float16", "bfloat16")
EMBODIMENTS = ("vehicle", "robot")  # docs/DESIGN.md §1


@dataclass(frozen=True)
class ModelConfig:
    """Which model runs, on which backend. `dir` is relative to the params file's package
    share (or absolute)."""

    dir: str = "models/blockplan-tiny"
    # "auto": onnxruntime for a float32 model on the CPU where it is installed (measured
    # faster there, docs/BENCHMARKS.md), torch otherwise (a GPU, Qwen2.5-VL folders, other
    # dtypes); tensorrt is only ever chosen by name
    backend: str = choice("auto", BACKENDS)
    dtype: str = choice("float32", DTYPES)
    num_threads: int = 1
    device: str = "cpu"  # torch backend: cpu, cuda or cuda:N (model, K/V cache, images)
    # What the model drives: `vehicle` (the driving schema) or `robot` (action chunks); it
    # must match the model folder's `embodiment` (docs/DESIGN.md §1).
    embodiment: str = choice("vehicle", EMBODIMENTS)
    # Torch backend on a CUDA device: decode forwards in static (batch, window) buckets
    # replayed as CUDA graphs, eager outside them (backends/graphs.py, docs/DECODING.md).
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        _check(bool(self.dir), "model.dir", self.dir, "must not be empty")
        _check_fields(self, "model")
        _check(
            1 <= self.num_threads <= MAX_THREADS,
            "model.num_threads",
            self.num_threads,
            f"must be in [1, {MAX_THREADS}]",
        )
        _check(
            re.fullmatch(r"cpu|cuda(:\d+)?", self.device) is not None,
            "model.device",
            self.device,
            "must be cpu, cuda or cuda:N",
        )
        _check(
            self.device == "cpu" or self.backend in ("torch", "auto"),
            "model.device",
            self.device,
            f"applies to the torch backend only ({self.backend} places itself)",
        )
        _check(
            not self.cuda_graphs or (self.backend in ("torch", "auto") and self.device != "cpu"),
            "model.cuda_graphs",
            self.cuda_graphs,
            "needs model.backend=torch and model.device=cuda or cuda:N (CUDA graphs record "
            f"GPU kernels; backend={self.backend}, device={self.device}: set it false)",
        )
