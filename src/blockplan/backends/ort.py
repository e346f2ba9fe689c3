"""ONNX Runtime executor of the exported graphs (CPU execution provider by default)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from blockplan.export.onnx_export import (
    DYNAMIC_FILE,
    SIDECAR,
    VERSION,
    ExportError,
    read_sidecar,
)


class OrtExecutor:
    """One `InferenceSession` per graph of an export folder (`blockplan export`)."""

    def __init__(
        self,
        folder: str | Path,
        expected_sha256: str | None = None,
        num_threads: int = 1,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ) -> None:
        import onnxruntime as ort  # optional dependency (extra `export`)

        folder = Path(folder)
        self.sidecar = read_sidecar(folder, expected_sha256)
        self.windows = tuple(self.sidecar["windows"])
        self.max_len = int(self.sidecar["max_len"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL

        def session(file: str):
            return ort.InferenceSession(str(folder / file), options, providers=list(providers))

        graphs = self.sidecar["graphs"]
        self.vision_session = session(graphs["vision"]["file"])
        dynamic = self.sidecar.get("dynamic", {}).get("decoder")
        if dynamic is not None and self.sidecar.get("version", 1) < VERSION:
            if not self.windows:
                raise ExportError(
                    f"{folder / SIDECAR}: version {self.sidecar.get('version', 1)} export, whose "
                    f"{DYNAMIC_FILE} this blockplan no longer runs; re-export with "
                    "`blockplan export`"
                )
            dynamic = None  # an older dynamic graph: run the static windows, padded
        # With the dynamic graph every forward is one call at its exact shape (StepBackend);
        # folders exported before it run the static windows, padded.
        self.dynamic = dynamic is not None
        if not self.dynamic and not self.windows:
            raise ExportError(
                f"{folder / SIDECAR}: no decoder graph (neither {DYNAMIC_FILE} nor a static "
                "window); re-export with `blockplan export`"
            )
        self.dynamic_session = session(dynamic["file"]) if dynamic else None
        # the positions the dynamic graph's RoPE table covers: [0, rope_rows)
        self.rope_rows = int(dynamic.get("rope_rows", 0)) if dynamic else 0
        layers = int(self.sidecar.get("decoder", {}).get("num_layers", 0))
        self.past_names = tuple(f"past_{kv}_{i}" for i in range(layers) for kv in ("k", "v"))
        windows = () if self.dynamic else self.windows
        self.step_sessions = {w: session(graphs[f"decoder_w{w}"]["file"]) for w in windows}
        flow = self.sidecar.get("flow_head") or {}
        self.flow_sessions = {
            b: session(graphs[f"flow_b{b}"]["file"]) for b in flow.get("batches", ())
        }

    def flow(self, x, tau, keys, values, key_mask):
        """The flow head's velocity graph of batch x.shape[0] (keys padded to max_len)."""
        B = x.shape[0]
        if B not in self.flow_sessions:
            raise ValueError(
                f"no flow head graph for batch {B} (exported: {sorted(self.flow_sessions)})"
            )
        feeds = {
            "x": _numpy(x.float()),
            "tau": _numpy(tau.float()),
            "keys": _numpy(keys.float()),
            "values": _numpy(values.float()),
            "key_mask": _numpy(key_mask),
        }
        (velocity,) = self.flow_sessions[B].run(None, feeds)
        return torch.from_numpy(velocity)

    def step(self, inputs_embeds, positions, attention_mask, past_kv):
        """A static window graph (padded by StepBackend)."""
        W = inputs_embeds.shape[1]
        feeds = {
            "inputs_embeds": _numpy(inputs_embeds),
            "positions": _numpy(positions),
            "attention_mask": _numpy(attention_mask),
            "past_kv": _numpy(past_kv),
        }
        logits, new_kv, new_raw = self.step_sessions[W].run(None, feeds)
        return torch.from_numpy(logits), torch.from_numpy(new_kv), torch.from_numpy(new_raw)

    def step_cached(self, inputs_embeds, positions, attention_mask, past, logit_rows):
        """The dynamic graph (`export/ort_step.py`); `past` holds each layer's cached keys
        and values (B, Hkv, M, D), k then v, handed over in place (contiguous float32).
        Returns numpy arrays."""
        feeds = {
            "inputs_embeds": _numpy(inputs_embeds),
            "positions": _numpy(positions),
            "attention_mask": _numpy(attention_mask),
            "logit_rows": _numpy(logit_rows),
        }
        for i, name in enumerate(self.past_names):
            feeds[name] = _numpy(past[i])
        return self.dynamic_session.run(None, feeds)  # logits, new_kv, new_raw (numpy)

    def vision(self, image, camera_index, frame_index):
        feeds = {
            "image": _numpy(image),
            "camera_index": _numpy(camera_index),
            "frame_index": _numpy(frame_index),
        }
        (tokens,) = self.vision_session.run(None, feeds)
        return torch.from_numpy(tokens)


def _numpy(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """A C-contiguous numpy view (a copy only where the tensor is strided)."""
    if isinstance(t, np.ndarray):
        return t if t.flags.c_contiguous else np.ascontiguousarray(t)
    return t.detach().contiguous().numpy()
