"""The `Backend` protocol: what the Planner and the decoding engine call to run the model.

A backend runs the vision tower and the decoder's pure forward; the engine (strategies, KV
cache verbs, acceptance) is the same on every backend. `torch` calls the model directly;
`onnxruntime` and `tensorrt` run the exported static-shape graphs through `StepBackend`
(`backends/step.py`), which pads windows and copies the new K/V into the engine's `KVCache`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.errors import UserError
from blockplan.model.config import DecoderConfig
from blockplan.model.planner_model import PlannerModel


class BackendSetupError(UserError, ValueError):
    """The named backend cannot run here (missing package, GPU or graphs); says why."""


class Backend(Protocol):
    """The engine's `TokenModel` plus the vision tower."""

    name: str

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,  # (B, S)
        *,
        inputs_embeds: torch.Tensor | None = None,  # (B, S, Hd)
        positions: torch.Tensor | None = None,  # (S,) or (B, S)
        mask: torch.Tensor | None = None,  # (S, L) or (B, S, L) bool
        cache: KVCache | None = None,
        num_logits: int | None = None,
        logit_rows: torch.Tensor | None = None,  # (R,) ascending indices into the S
    ) -> torch.Tensor:
        """Logits (B, S', V) of the last S' = num_logits new tokens (all by default), or of
        the R new tokens `logit_rows`; the new tokens' K/V are written, pending, after the
        cache's committed slots."""
        ...

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, S, Hd)."""
        ...

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """(K*T, 3, H, W) view-major model-ready images → visual tokens (K*T, G, Hd)."""
        ...

    @property
    def decoder_config(self) -> DecoderConfig: ...


class TorchBackend:
    """The model itself, in eager PyTorch (the reference every other backend matches), on
    the device its weights are on (`model.device`): the engine's ids, positions and masks
    are small CPU tensors and move there per call; the K/V cache and logits live there."""

    name = "torch"
    streams = True  # the streaming prefill runs on it (streaming/prefill.py)

    def __init__(self, model: PlannerModel) -> None:
        self.model = model
        self.device = next(model.parameters()).device

    def __call__(self, input_ids: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        if self.device.type == "cpu":  # where the engine's tensors are: nothing to move
            return self.model(input_ids, **kwargs)
        if input_ids is not None:
            input_ids = input_ids.to(self.device)
        moved = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
        }
        return self.model(input_ids, **moved)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed(input_ids.to(self.device))

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return self.model.visual(images.to(self.device))

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.model.decoder_config
