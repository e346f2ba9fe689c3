"""`blockplan quantize`: a model folder with its linears quantized (INT8, FP8, W4).

The output is a model folder like any other (`--model OUT` everywhere): config.json records
the scheme, model.safetensors holds the codes and scales, the source folder's other files
(tokenizer, n-gram table, settings, model card) are copied, and manifest.json covers every
file. For `int8` (with onnxruntime installed) it also holds `onnx/`: the decoder step as ONNX
Runtime's INT8 graph, which `model.backend: onnxruntime` then runs (docs/ALGORITHMS.md
"Quantized weights").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import sys
from pathlib import Path

from blockplan.model.quantized import DEFAULT_MODULES, GROUP_SIZE, MODULES, SCHEMES

log = logging.getLogger("blockplan.quantize")
ONNX_SUBDIR = "onnx"  # backends/factory.py looks for an export there


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR", help="float model folder")
    parser.add_argument("--scheme", required=True, choices=SCHEMES, help="quantization scheme")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (new)")
    parser.add_argument(
        "--group-size", type=int, default=GROUP_SIZE, help="w4: group along the input dim"
    )
    parser.add_argument("--seed", type=int, default=0, help="w4: seed of the rotation's signs")
    parser.add_argument(
        "--modules",
        choices=MODULES,
        help="linears: the decoder layers' and every other linear with >= 1024 weights but "
        "the LM head (default for w4); decoder_linears: the decoder layers' only (default "
        "for int8, fp8)",
    )
    parser.add_argument(
        "--float-storage",
        choices=("float32", "float16"),
        help="how the tensors kept in float are stored (default: float16 for w4, else float32)",
    )
    parser.add_argument(
        "--no-onnx", action="store_true", help="int8: skip the ONNX Runtime INT8 export"
    )
    parser.add_argument("--params", help="params YAML (default: the shipped params/planner.yaml)")


def run(args: argparse.Namespace) -> int:
    from blockplan.model.config import ModelConfigError
    from blockplan.model.quantized import QuantSpec

    source, out = Path(args.model), Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: --out {out}: exists and is not empty", file=sys.stderr)
        return 2
    storage = args.float_storage or ("float16" if args.scheme == "w4" else "float32")
    try:
        modules = args.modules or DEFAULT_MODULES[args.scheme]
        spec = QuantSpec(args.scheme, args.group_size, args.seed, storage, modules)
    except ModelConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = write_quantized(source, out, spec, with_onnx=not args.no_onnx, params=args.params)
    print(json.dumps(summary, indent=2))
    return 0


def write_quantized(
    source: Path, out: Path, spec, with_onnx: bool = True, params: str | None = None
) -> dict:
    """Quantize the folder `source` into `out` (verified on the way in, manifest on the way
    out); returns a summary (sizes, files)."""
    from blockplan.model.pretrained import load_pretrained
    from blockplan.model.quantized_folder import (
        QUANTIZATION_KEY,
        folder_tensors,
        quantized_copy,
    )
    from blockplan.model.weights import (
        CONFIG_NAME,
        INDEX_NAME,
        MANIFEST_NAME,
        WEIGHTS_NAME,
        WeightsError,
        read_config,
        save_folder,
        verify_folder,
        write_manifest,
    )
    from blockplan.planner.parts import TOKENIZER_NAME

    files = [p.name for p in source.iterdir() if p.is_file() and p.name != MANIFEST_NAME]
    weights = verify_folder(source, also=files)
    raw = read_config(source)
    if QUANTIZATION_KEY in raw:
        raise WeightsError(f"{source}/{CONFIG_NAME}: already quantized ({raw[QUANTIZATION_KEY]})")
    model = load_pretrained(source, verify=False)
    log.info("quantizing %s (%s weights) with %s", source, weights, spec.scheme)
    quantized = quantized_copy(model, spec)
    skip = {CONFIG_NAME, MANIFEST_NAME, WEIGHTS_NAME, INDEX_NAME}
    extra = {}
    for p in sorted(source.iterdir()):
        if p.is_file() and p.name not in skip and not p.name.endswith(".safetensors"):
            extra[p.name] = p
    config = dict(raw) | {QUANTIZATION_KEY: spec.to_dict()}
    save_folder(folder_tensors(quantized, spec), config, out)
    for name, path in extra.items():
        shutil.copyfile(path, out / name)
    write_manifest(out)
    exported = spec.scheme == "int8" and with_onnx and _has_onnx(raw)
    if exported:
        _export_int8(out, params)
        write_manifest(out, [ONNX_SUBDIR])
    return {
        "out": str(out),
        "scheme": spec.to_dict(),
        "quantized_linears": sum(
            1 for m in quantized.modules() if type(m).__name__ == "QuantLinear"
        ),
        "weights_bytes": (out / WEIGHTS_NAME).stat().st_size,
        "source_weights_bytes": _weights_size(source),
        "folder_bytes": _folder_size(out),
        "source_folder_bytes": _folder_size(source),
        "onnx_int8": exported,
        "tokenizer": (out / TOKENIZER_NAME).is_file(),
    }


def _has_onnx(raw: dict) -> bool:
    """Whether the ONNX Runtime export applies: onnxruntime installed, a blockplan planner."""
    if raw.get("model_type") != "blockplan_planner":
        return False
    found = importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx")
    if not found:
        log.warning("onnxruntime is not installed: no ONNX Runtime INT8 graphs written")
    return bool(found)


def _export_int8(out: Path, params: str | None) -> None:
    """`out/onnx/`: the quantized model's dynamic decoder step, as ORT INT8, and the vision
    graph, at the params' cache size (what the onnxruntime backend looks for)."""
    from blockplan.config import default_params_path, load_config
    from blockplan.export.onnx_export import export_onnx
    from blockplan.export.ort_quant import quantize_export
    from blockplan.planner.planner import Planner

    config = load_config(params or default_params_path())
    config = config.with_params({"model.backend": "torch", "model.dtype": "float32"})
    planner = Planner.from_folder(out, config)  # loads the quantized folder as any other
    target = out / ONNX_SUBDIR
    log.info("exporting the ONNX Runtime INT8 graphs into %s", target)
    export_onnx(
        planner.model,
        target,
        planner.cache.max_len,
        config.rollouts.num_rollouts,
        (),
        source=f"blockplan quantize --scheme int8 ({out.name})",
    )
    quantize_export(target)


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _weights_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))
