"""ONNX export of the planner: the vision graph per frame and the decoder step graph."""

from blockplan.export.onnx_export import (
    DEFAULT_OPSET,
    DEFAULT_WINDOWS,
    ExportError,
    export_onnx,
    model_sha256,
    read_sidecar,
)

__all__ = [
    "DEFAULT_OPSET",
    "DEFAULT_WINDOWS",
    "ExportError",
    "export_onnx",
    "model_sha256",
    "read_sidecar",
]
