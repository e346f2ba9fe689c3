"""Our Qwen2-VL preprocessing against transformers' image processor (code, no download)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.model.qwen2_5_vl.config import QwenVisionConfig
from blockplan.model.qwen2_5_vl.preprocess import (
    ImageSizeError,
    patchify,
    preprocess_image,
    smart_resize,
)
from tests.optional import importorskip


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((448, 448), (448, 448)),  # already a multiple of 28
        ((100, 150), (112, 140)),  # rounded to the nearest multiples
        ((30, 40), (56, 84)),  # below min_pixels: scaled up
        ((2000, 3000), (812, 1204)),  # above max_pixels: scaled down, ratio kept
    ],
)
def test_smart_resize(size, expected):
    h, w = smart_resize(*size)
    assert (h, w) == expected
    assert h % 28 == 0 and w % 28 == 0 and 56 * 56 <= h * w <= 28 * 28 * 1280


def test_smart_resize_rejects_extreme_aspect_ratio():
    with pytest.raises(ImageSizeError, match="aspect ratio"):
        smart_resize(10, 3000)


def test_patch_order_is_merge_units_row_major():
    config = QwenVisionConfig()
    # channel 0 holds the row index, channel 1 the column, channel 2 zero: read them back
    rows, cols = torch.meshgrid(torch.arange(56.0), torch.arange(84.0), indexing="ij")
    pixels = torch.stack([rows, cols, torch.zeros_like(rows)])  # (3, 56, 84)
    patches = patchify(pixels, config).view(24, 3, 2, 14, 14)  # (S, C, T, P, P)
    assert torch.equal(patches[:, :, 0], patches[:, :, 1])  # the image repeated over T
    top_left = patches[:, :2, 0, 0, 0]  # (S, 2) row, column of each patch's first pixel
    # first merge unit: patches (0,0), (0,1), (1,0), (1,1); the next unit starts at column 2
    expected = [[0, 0], [0, 14], [14, 0], [14, 14], [0, 28], [0, 42]]
    assert top_left[:6].tolist() == expected


@pytest.mark.parametrize("size", [(56, 84), (100, 150), (720, 1280), (30, 40)])
def test_matches_transformers_processor(size):
    transformers = importorskip("transformers")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    del transformers
    image = np.random.default_rng(sum(size)).integers(0, 256, (*size, 3), dtype=np.uint8)
    expected = Qwen2VLImageProcessorPil()(images=[image], return_tensors="pt")
    got = preprocess_image(torch.from_numpy(image), QwenVisionConfig())
    h, w = smart_resize(*size)
    assert expected["image_grid_thw"].tolist() == [[1, h // 14, w // 14]]
    assert got.shape == expected["pixel_values"].shape
    assert (got - expected["pixel_values"]).abs().max().item() <= 1e-5


def test_rejects_non_uint8():
    with pytest.raises(ImageSizeError, match="uint8"):
        preprocess_image(torch.zeros(56, 56, 3), QwenVisionConfig())
