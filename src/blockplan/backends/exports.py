"""The ONNX export a model folder carries (`<model folder>/onnx/`), when it fits these weights."""

from __future__ import annotations

import json
from pathlib import Path

from blockplan.export.onnx_export import SIDECAR, VERSION

ONNX_SUBDIR = "onnx"


def matching_export(
    folder: Path | None,
    sha: str,
    max_len: int,
    flow_batches: tuple[int, ...] = (),
    quantization: str | None = None,
) -> Path | None:
    """`folder`'s ONNX export when it holds these weights (`sha`) at `max_len` in the current
    graph version, quantized as `quantization` asks (None: float graphs), with a flow-head
    graph for each of `flow_batches`; else None."""
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
