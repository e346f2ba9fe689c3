"""Qwen2-VL / Qwen2.5-VL image preprocessing: uint8 frames → flattened patches.

What HF's `Qwen2VLImageProcessor` does, from H×W×3 uint8 RGB: resize (PIL bicubic) to the
`smart_resize` size — both sides multiples of 28 (patch 14 × merge 2), the pixel count in
[min_pixels, max_pixels], the aspect ratio kept as closely as possible — then scale to [0, 1],
normalize with the CLIP mean/std, repeat the single image to the 2 frames of a temporal
patch, and cut into patches of (C, T, 14, 14) in the order the vision tower expects: 2 × 2
merge units row-major, patches row-major inside a unit. Result: (g_h*g_w, C*T*14*14).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image

from blockplan.model.qwen2_5_vl.config import QwenVisionConfig

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280


class ImageSizeError(ValueError):
    """An image cannot be brought to a Qwen2-VL size (bad shape or aspect ratio)."""


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """The (height, width) HF's processor resizes an image to (same rounding rules)."""
    if min(height, width) < 1 or max(height, width) / min(height, width) > 200:
        raise ImageSizeError(f"image {height}x{width}: aspect ratio must be below 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_uint8(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """uint8 (H, W, 3) → uint8 (h, w, 3) with PIL's bicubic filter: what the processor
    (resample=BICUBIC) does, pixel for pixel."""
    if tuple(image.shape[:2]) == tuple(size):
        return image
    resized = Image.fromarray(image.cpu().numpy()).resize((size[1], size[0]), Image.BICUBIC)
    return torch.from_numpy(np.asarray(resized).copy())


def patchify(pixels: torch.Tensor, config: QwenVisionConfig) -> torch.Tensor:
    """Normalized float (3, h, w) → patches (g_h*g_w, C*T*P*P), one image repeated over the
    T frames of a temporal patch."""
    C, h, w = pixels.shape
    P, T, m = config.patch_size, config.temporal_patch_size, config.spatial_merge_size
    if h % (P * m) or w % (P * m):
        raise ImageSizeError(f"image {h}x{w}: sides must be multiples of {P * m}")
    gh, gw = h // P, w // P
    x = pixels[None].expand(T, C, h, w)  # (T, C, h, w)
    x = x.reshape(T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(2, 5, 3, 6, 1, 0, 4, 7)  # (gh/m, gw/m, m, m, C, T, P, P)
    return x.reshape(gh * gw, C * T * P * P)


def preprocess_image(
    image: torch.Tensor, config: QwenVisionConfig, size: tuple[int, int] | None = None
) -> torch.Tensor:
    """uint8 (H, W, 3) RGB → float32 patches (g_h*g_w, C*T*P*P) at `size` (default:
    `smart_resize` of the image's own size)."""
    if image.dim() != 3 or image.shape[-1] != 3 or image.dtype != torch.uint8:
        raise ImageSizeError(f"image {tuple(image.shape)} {image.dtype}: expected uint8 (H, W, 3)")
    size = size or smart_resize(int(image.shape[0]), int(image.shape[1]), config.factor)
    resized = resize_uint8(image, size)  # (h, w, 3) uint8
    x = resized.permute(2, 0, 1).float() / 255.0  # (3, h, w)
    mean = torch.tensor(CLIP_MEAN)[:, None, None]
    std = torch.tensor(CLIP_STD)[:, None, None]
    return patchify((x - mean) / std, config)
