"""Image decoding in every encoding, row padding, endianness and bad inputs."""

from __future__ import annotations

import array
import io
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage

from blockplan.bags import (
    ImageDecodeError,
    TypestoreMessages,
    decode_compressed_image,
    decode_image,
    encode_compressed_image,
    encode_image,
    image_msg_to_frame,
)

NS = TypestoreMessages()


def _rgb(h: int = 6, w: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _raw(encoding: str, h: int, w: int, step: int, data, is_bigendian: int = 0):
    """A raw Image as rclpy would hand it over (plain attributes, bytes-like data)."""
    return SimpleNamespace(
        encoding=encoding, height=h, width=w, step=step, data=data, is_bigendian=is_bigendian
    )


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
@pytest.mark.parametrize("row_padding", [0, 5])
def test_colour_encodings_round_trip(encoding: str, row_padding: int) -> None:
    rgb = _rgb()
    msg = encode_image(NS, rgb, 7, "cam", encoding=encoding, row_padding=row_padding)
    assert msg.step == 8 * (4 if "a" in encoding else 3) + row_padding
    np.testing.assert_array_equal(decode_image(msg), rgb)


def test_bgr8_really_swaps_channels() -> None:
    data = bytes([10, 20, 30])  # one pixel, B=10 G=20 R=30
    out = decode_image(_raw("bgr8", 1, 1, 3, data))
    assert out.tolist() == [[[30, 20, 10]]]


def test_mono8_replicates_grey() -> None:
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4)
    padded = np.concatenate([grey, np.full((3, 2), 99, np.uint8)], axis=1)
    out = decode_image(_raw("mono8", 3, 4, 6, padded.tobytes()))
    assert out.shape == (3, 4, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], grey)


def test_mono8_encoding_is_luma() -> None:
    rgb = np.full((2, 2, 3), 200, np.uint8)
    np.testing.assert_array_equal(decode_image(encode_image(NS, rgb, 0, "c", "mono8")), rgb)


@pytest.mark.parametrize("big", [0, 1])
def test_mono16_respects_endianness(big: int) -> None:
    values = np.array([[0x1234, 0xABCD], [0x00FF, 0xFF00]], dtype=">u2" if big else "<u2")
    out = decode_image(_raw("mono16", 2, 2, 4, values.tobytes(), is_bigendian=big))
    assert out[..., 0].tolist() == [[0x12, 0xAB], [0x00, 0xFF]]


def test_rgb16_and_bgr16() -> None:
    px = np.array([[[0x1000, 0x2000, 0x3000]]], dtype="<u2")
    assert decode_image(_raw("rgb16", 1, 1, 6, px.tobytes())).tolist() == [[[0x10, 0x20, 0x30]]]
    assert decode_image(_raw("bgr16", 1, 1, 6, px.tobytes())).tolist() == [[[0x30, 0x20, 0x10]]]


# BT.601 limited range: (Y, U, V) of white, black, red, green, blue.
_YUV_COLOURS = [
    ((235, 128, 128), (255, 255, 255)),
    ((16, 128, 128), (0, 0, 0)),
    ((81, 90, 240), (255, 0, 0)),
    ((145, 54, 34), (0, 255, 0)),
    ((41, 240, 110), (0, 0, 255)),
]


@pytest.mark.parametrize("encoding", ["yuv422", "uyvy", "yuyv", "yuv422_yuy2"])
def test_yuv422_known_colours(encoding: str) -> None:
    order = "uyvy" if encoding in ("yuv422", "uyvy") else "yuyv"
    row = []
    for (y, u, v), _ in _YUV_COLOURS:
        row += [u, y, v, y] if order == "uyvy" else [y, u, y, v]
    step = len(row) + 4  # padded row
    data = bytes(row + [0, 0, 0, 0]) * 2
    out = decode_image(_raw(encoding, 2, 2 * len(_YUV_COLOURS), step, data))
    expected = np.repeat(np.array([rgb for _, rgb in _YUV_COLOURS]), 2, axis=0)
    assert np.abs(out[0].astype(int) - expected).max() <= 3
    np.testing.assert_array_equal(out[0], out[1])


def test_yuv_distinct_pixels_in_a_pair_keep_their_luma() -> None:
    out = decode_image(_raw("uyvy", 1, 2, 4, bytes([128, 16, 128, 235])))
    assert out[0, 0].tolist() == [0, 0, 0] and out[0, 1].tolist() == [255, 255, 255]


@settings(max_examples=25, deadline=None)
@given(
    h=st.integers(1, 7),
    w=st.integers(1, 9),
    pad=st.integers(0, 7),
    enc=st.sampled_from(["rgb8", "bgr8", "rgba8", "bgra8"]),
)
def test_round_trip_property(h: int, w: int, pad: int, enc: str) -> None:
    rgb = _rgb(h, w, seed=h * 31 + w)
    np.testing.assert_array_equal(decode_image(encode_image(NS, rgb, 0, "c", enc, pad)), rgb)


@pytest.mark.parametrize(
    "container", [bytes, bytearray, lambda b: array.array("B", b), lambda b: list(b)]
)
def test_rclpy_style_data_containers(container) -> None:
    rgb = _rgb(2, 3)
    out = decode_image(_raw("rgb8", 2, 3, 9, container(rgb.tobytes())))
    np.testing.assert_array_equal(out, rgb)


def test_unknown_encoding_is_named() -> None:
    with pytest.raises(ImageDecodeError, match="'bayer_rggb8' is not supported"):
        decode_image(_raw("bayer_rggb8", 2, 2, 2, bytes(4)))


def test_data_length_mismatch_is_named() -> None:
    with pytest.raises(ImageDecodeError, match=r"data length 17 != height×step = 2×9 = 18"):
        decode_image(_raw("rgb8", 2, 3, 9, bytes(17)))


def test_step_too_small_is_named() -> None:
    with pytest.raises(ImageDecodeError, match="step 8 is smaller"):
        decode_image(_raw("rgb8", 2, 3, 8, bytes(16)))


def test_odd_width_yuv_and_empty_image() -> None:
    with pytest.raises(ImageDecodeError, match="even width"):
        decode_image(_raw("yuyv", 1, 3, 6, bytes(6)))
    with pytest.raises(ImageDecodeError, match="empty size"):
        decode_image(_raw("rgb8", 0, 3, 9, b""))


@pytest.mark.parametrize(
    "fmt", ["jpeg", "JPEG", "rgb8; jpeg compressed bgr8", "bgr8; jpg compressed", ""]
)
def test_jpeg_with_loose_format_strings(fmt: str) -> None:
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[:, :8] = (200, 30, 30)
    msg = encode_compressed_image(NS, rgb, 3, "cam", "jpeg", quality=95)
    msg.format = fmt
    out = decode_compressed_image(msg)
    assert out.shape == (16, 16, 3)
    assert np.abs(out.astype(int) - rgb).mean() < 4


@pytest.mark.parametrize("fmt", ["png", "bgr8; png compressed bgr8", "mono8; png compressed "])
def test_png_is_lossless(fmt: str) -> None:
    rgb = _rgb(5, 7)
    msg = encode_compressed_image(NS, rgb, 3, "cam", "png")
    msg.format = fmt
    np.testing.assert_array_equal(decode_compressed_image(msg), rgb)


def test_png_grey_and_16_bit() -> None:
    grey = np.arange(20, dtype=np.uint8).reshape(4, 5)
    buf = io.BytesIO()
    PILImage.fromarray(grey).save(buf, format="PNG")
    out = decode_compressed_image(SimpleNamespace(format="png", data=buf.getvalue()))
    np.testing.assert_array_equal(out[..., 1], grey)
    wide = (grey.astype(np.uint16) << 8) | 0x7F
    buf = io.BytesIO()
    PILImage.fromarray(wide).save(buf, format="PNG")
    out = decode_compressed_image(SimpleNamespace(format="png", data=buf.getvalue()))
    np.testing.assert_array_equal(out[..., 0], grey)


def test_corrupt_jpeg_is_an_error() -> None:
    good = encode_compressed_image(NS, _rgb(32, 32), 0, "c", "jpeg")
    truncated = SimpleNamespace(format="jpeg", data=bytes(good.data[: len(good.data) // 2]))
    with pytest.raises(ImageDecodeError, match="corrupt jpeg"):
        decode_compressed_image(truncated)
    garbage = SimpleNamespace(format="jpeg", data=b"\xff\xd8" + bytes(range(200)))
    with pytest.raises(ImageDecodeError, match="corrupt jpeg"):
        decode_compressed_image(garbage)


def test_compressed_format_mismatch_and_unknown_codec() -> None:
    png = encode_compressed_image(NS, _rgb(), 0, "c", "png")
    with pytest.raises(ImageDecodeError, match="says jpeg"):
        decode_compressed_image(SimpleNamespace(format="jpeg", data=bytes(png.data)))
    with pytest.raises(ImageDecodeError, match="neither jpeg nor png"):
        decode_compressed_image(SimpleNamespace(format="bmp", data=b"BM" + bytes(40)))


def test_image_msg_to_frame_uses_header_stamp() -> None:
    rgb = _rgb()
    raw = encode_image(NS, rgb, 1_500_000_001, "cam")
    frame = image_msg_to_frame(raw, "front")
    assert frame.stamp_ns == 1_500_000_001 and frame.camera == "front"
    comp = encode_compressed_image(NS, rgb, 42, "cam", "png")
    np.testing.assert_array_equal(image_msg_to_frame(comp, "front").image, rgb)
