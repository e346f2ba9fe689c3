"""`blockplan build-engine`: TensorRT engines from a `blockplan export` folder (needs a GPU)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

log = logging.getLogger("blockplan.build_engine")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onnx", required=True, metavar="DIR", help="a `blockplan export` folder")
    parser.add_argument("--precision", choices=("fp16", "fp8", "int8"), default="fp16")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="engine cache root (a folder per key)"
    )
    parser.add_argument(
        "--calibrate-model",
        metavar="DIR",
        help="int8: the model folder the export came from; its step inputs on synthetic "
        "observations calibrate the INT8 ranges",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")


def run(args: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        print("error: build-engine needs a CUDA GPU and TensorRT 10", file=sys.stderr)
        return 1
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        print("error: tensorrt is not installed (pip install '.[tensorrt]')", file=sys.stderr)
        return 1
    from blockplan.backends.trt_build import build_engines

    calibration = None
    if args.precision == "int8" and args.calibrate_model:
        calibration = record_calibration(Path(args.calibrate_model), Path(args.onnx))
    folder = build_engines(args.onnx, args.out, args.precision, calibration, args.force)
    print(json.dumps(json.loads((folder / "engines.json").read_text()), indent=2))
    return 0


def record_calibration(model_dir: Path, onnx_dir: Path, num_observations: int = 4):
    """Step inputs per window, recorded while an ORT planner decodes synthetic inputs."""

    from blockplan.backends.ort import OrtExecutor
    from blockplan.backends.step import StepBackend
    from blockplan.config import PlannerConfig
    from blockplan.export.onnx_export import STEP_INPUTS, model_sha256
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation

    planner = Planner.from_folder(model_dir, PlannerConfig())
    executor = OrtExecutor(onnx_dir, model_sha256(planner.model))
    recorded: dict[int, list] = {}
    step = executor.step

    def recording_step(*inputs):
        if inputs[0].shape[0] == 1:  # the profile's optimum batch
            recorded.setdefault(inputs[0].shape[1], []).append(
                {n: t.clone() for n, t in zip(STEP_INPUTS, inputs, strict=True)}
            )
        return step(*inputs)

    executor.step = recording_step
    backend = StepBackend("onnxruntime", planner.model, executor)
    recorder = Planner(
        planner.model, planner.tokenizer, planner.config, planner.schema, backend=backend
    )
    for seed in range(num_observations):
        recorder.decode(synthetic_observation(PlannerConfig(), seed), "scaffold_spec")
    log.info("calibration batches per window: %s", {w: len(b) for w, b in recorded.items()})
    return recorded
