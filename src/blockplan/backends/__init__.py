"""Model runners behind one `Backend` protocol: torch, onnxruntime, tensorrt.

`create_backend` picks one by name (`config.model.backend`). The engine calls every backend
the same way; `onnxruntime` and `tensorrt` run the static-shape graphs of `blockplan export`.
"""

from blockplan.backends.base import Backend, BackendSetupError, TorchBackend
from blockplan.backends.exports import ONNX_SUBDIR
from blockplan.backends.factory import create_backend
from blockplan.backends.step import StepBackend, StepExecutor, TorchGraphExecutor

__all__ = [
    "ONNX_SUBDIR",
    "Backend",
    "BackendSetupError",
    "StepBackend",
    "StepExecutor",
    "TorchBackend",
    "TorchGraphExecutor",
    "create_backend",
]
