"""Per-frame caches of the streaming window: frame keys, their retention, vision features.

A frame is identified by (camera, stamp, a pixel fingerprint): a degraded (black) frame that
shares a real frame's camera and stamp must not share its features or K/V. The caches keep
every frame a window used for as long as a later window could still pick it — frames no
older than the newest frame of their camera minus `span_ns` — so a frame is reused at
whatever slot it occupies next, not only after a slide of exactly one frame. DECODING.md
"Streaming the frame window".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch

from blockplan.model.vision import VisionTower
from blockplan.types import CameraFrame

FrameKey = tuple[str, int, int]  # (camera, stamp_ns, fingerprint of a pixel subsample)
V = TypeVar("V")


def frame_key(frame: CameraFrame) -> FrameKey:
    pixels = np.ascontiguousarray(frame.image).reshape(-1)
    sample = pixels[:: max(1, pixels.size // 4096)]  # <= ~4 K bytes, strided over the image
    return frame.camera, frame.stamp_ns, hash((frame.image.shape, sample.tobytes()))


def retain(
    store: dict[FrameKey, V], window: Sequence[FrameKey], span_ns: int, capacity: int
) -> dict[FrameKey, V]:
    """The entries of `store` a later window may still use: the current `window`'s frames
    and, per camera of the window, the frames no older than its newest stamp − `span_ns`;
    at most `capacity` per camera (the newest; the window's own frames always stay)."""
    newest: dict[str, int] = {}
    for camera, stamp, _ in window:
        newest[camera] = max(stamp, newest.get(camera, stamp))
    current = set(window)
    by_camera: dict[str, list[FrameKey]] = {}
    for key in store:
        camera, stamp, _ = key
        if key in current or (camera in newest and stamp >= newest[camera] - span_ns):
            by_camera.setdefault(camera, []).append(key)
    kept: dict[FrameKey, V] = {}
    for keys in by_camera.values():
        keys.sort(key=lambda k: (k in current, k[1]), reverse=True)  # window first, newest
        for key in keys[: max(capacity, sum(k in current for k in keys))]:
            kept[key] = store[key]
    return kept


class VisionFeatureCache:
    """Projected features (G, W) per frame key; the window's visual tokens from them.

    Only frames not seen before go through the vision encoder; the identity embeddings
    (camera, frame slot, grid cell) are added at each frame's current slot: lossless."""

    def __init__(
        self, tower: VisionTower, num_frames: int, span_ns: int = 0, capacity: int = 0
    ) -> None:
        self.tower = tower
        self.num_frames = num_frames
        self.span_ns = span_ns
        self.capacity = capacity or 3 * num_frames
        self._features: dict[FrameKey, torch.Tensor] = {}
        self.frames_encoded = 0  # images that went through the encoder

    def __len__(self) -> int:
        return len(self._features)

    def clear(self) -> None:
        self._features.clear()

    @torch.no_grad()
    def __call__(self, frames: Sequence[CameraFrame], dtype: torch.dtype) -> torch.Tensor:
        """Visual tokens (K*T, G, W) of the view-major `frames` (checked by the caller)."""
        keys = [frame_key(f) for f in frames]
        missing = {k: f for k, f in zip(keys, frames, strict=True) if k not in self._features}
        device = next(self.tower.parameters()).device
        if missing:
            images = self.tower.preprocess_frames([f.image for f in missing.values()])
            images = images.to(device, dtype)  # (N, 3, H, W)
            features = self.tower.project(images)  # (N, G, W)
            for key, feature in zip(missing, features, strict=True):
                self._features[key] = feature
            self.frames_encoded += len(missing)
        self._features = retain(self._features, keys, self.span_ns, self.capacity)
        tokens = torch.stack([self._features[k] for k in keys])  # (K*T, G, W)
        T = self.num_frames
        index = torch.arange(len(keys), device=device)
        return self.tower.add_identity(tokens, index // T, index % T)  # (K*T, G, W)
