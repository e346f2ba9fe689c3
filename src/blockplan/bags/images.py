"""sensor_msgs/Image and CompressedImage ↔ H×W×3 uint8 RGB, duck-typed on message fields.

Raw encodings (sensor_msgs/image_encodings): rgb8, bgr8, rgba8, bgra8, mono8, mono16, rgb16,
bgr16, yuv422 (= uyvy), uyvy, yuyv (= yuv422_yuy2). `step` (bytes per row, row padding
allowed) and `is_bigendian` (16-bit encodings) are respected; 16-bit values keep their high
byte. Compressed: jpeg and png, whatever the loose `format` string says around them
("jpeg", "rgb8; jpeg compressed bgr8", "png"...). Any violation raises `ImageDecodeError`
naming the problem.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image as PILImage

from blockplan.bags.namespace import MessageNamespace
from blockplan.bags.stamps import header_stamp_ns, make_header
from blockplan.types import CameraFrame

# encoding -> (channels, bytes per channel)
_RAW_LAYOUTS: dict[str, tuple[int, int]] = {
    "rgb8": (3, 1),
    "bgr8": (3, 1),
    "rgba8": (4, 1),
    "bgra8": (4, 1),
    "mono8": (1, 1),
    "8uc1": (1, 1),
    "8uc3": (3, 1),
    "mono16": (1, 2),
    "16uc1": (1, 2),
    "rgb16": (3, 2),
    "bgr16": (3, 2),
}
_YUV422 = {"yuv422": "uyvy", "uyvy": "uyvy", "yuyv": "yuyv", "yuv422_yuy2": "yuyv"}
RAW_ENCODINGS: tuple[str, ...] = (*_RAW_LAYOUTS, *_YUV422)
_JPEG_MAGIC = b"\xff\xd8"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ImageDecodeError(ValueError):
    """An image message cannot be turned into an RGB array; the message says why."""


def _as_bytes_array(data: Any) -> np.ndarray:
    """The message's `data` as a flat uint8 array (numpy, array.array, bytes or list)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "buffer_info"):
        return np.frombuffer(data, dtype=np.uint8)
    return np.asarray(data, dtype=np.uint8)


def _yuv422_to_rgb(rows: np.ndarray, order: str) -> np.ndarray:
    """(H, W*2) packed 4:2:2 bytes → (H, W, 3) RGB with BT.601 limited-range coefficients
    (what OpenCV's COLOR_YUV2RGB_UYVY / _YUYV use)."""
    h = rows.shape[0]
    quads = rows.reshape(h, -1, 4).astype(np.float32)  # (H, W/2, 4): one quad = two pixels
    if order == "uyvy":
        u, y0, v, y1 = quads[..., 0], quads[..., 1], quads[..., 2], quads[..., 3]
    else:
        y0, u, y1, v = quads[..., 0], quads[..., 1], quads[..., 2], quads[..., 3]
    y = np.stack([y0, y1], axis=-1).reshape(h, -1)  # (H, W)
    u = np.repeat(u, 2, axis=1) - 128.0
    v = np.repeat(v, 2, axis=1) - 128.0
    c = 1.164 * (y - 16.0)
    rgb = np.stack([c + 1.596 * v, c - 0.392 * u - 0.813 * v, c + 2.017 * u], axis=-1)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def decode_image(msg: Any) -> np.ndarray:
    """sensor_msgs/Image → (H, W, 3) uint8 RGB."""
    encoding = str(msg.encoding).strip().lower()
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageDecodeError(f"Image has an empty size {width}x{height}")
    if encoding in _YUV422:
        channels, depth = 2, 1
        if width % 2:
            raise ImageDecodeError(f"Image encoding {encoding!r} needs an even width, got {width}")
    elif encoding in _RAW_LAYOUTS:
        channels, depth = _RAW_LAYOUTS[encoding]
    else:
        raise ImageDecodeError(
            f"Image encoding {msg.encoding!r} is not supported (known: {list(RAW_ENCODINGS)})"
        )
    row_bytes = width * channels * depth
    if step < row_bytes:
        raise ImageDecodeError(
            f"Image step {step} is smaller than width×bytes per pixel = {row_bytes} ({encoding})"
        )
    data = _as_bytes_array(msg.data)
    if data.size != height * step:
        raise ImageDecodeError(
            f"Image data length {data.size} != height×step = {height}×{step} = {height * step}"
        )
    rows = data.reshape(height, step)[:, :row_bytes]  # (H, row_bytes), padding dropped
    if encoding in _YUV422:
        return _yuv422_to_rgb(rows, _YUV422[encoding])
    if depth == 2:
        dtype = ">u2" if int(msg.is_bigendian) else "<u2"
        values = np.ascontiguousarray(rows).view(dtype)
        pixels = (values >> 8).astype(np.uint8).reshape(height, width, channels)
    else:
        pixels = rows.reshape(height, width, channels)
    if channels == 1:
        return np.ascontiguousarray(np.repeat(pixels, 3, axis=2))
    if encoding.startswith("bgr"):
        pixels = pixels[..., 2::-1]
    return np.ascontiguousarray(pixels[..., :3])


def _compressed_codec(fmt: str, data: bytes) -> str:
    fmt = fmt.lower()
    if "jpeg" in fmt or "jpg" in fmt:
        return "jpeg"
    if "png" in fmt:
        return "png"
    if data.startswith(_JPEG_MAGIC):
        return "jpeg"
    if data.startswith(_PNG_MAGIC):
        return "png"
    raise ImageDecodeError(f"CompressedImage format {fmt!r} names neither jpeg nor png")


def decode_compressed_image(msg: Any) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png) → (H, W, 3) uint8 RGB."""
    data = _as_bytes_array(msg.data).tobytes()
    codec = _compressed_codec(str(msg.format), data)
    magic = _JPEG_MAGIC if codec == "jpeg" else _PNG_MAGIC
    if not data.startswith(magic):
        raise ImageDecodeError(
            f"CompressedImage format {msg.format!r} says {codec} but the data does not start "
            f"like a {codec} file ({len(data)} bytes)"
        )
    try:
        with PILImage.open(io.BytesIO(data), formats=[codec.upper()]) as img:
            img.load()
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                mono = (np.asarray(img, dtype=np.uint32) >> 8).astype(np.uint8)
                return np.ascontiguousarray(np.repeat(mono[..., None], 3, axis=2))
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except (OSError, ValueError, SyntaxError) as e:  # PIL reports corrupt data with these
        raise ImageDecodeError(
            f"corrupt {codec} in CompressedImage ({len(data)} bytes): {e}"
        ) from e


def is_compressed_image(msg: Any) -> bool:
    """CompressedImage has `format`; Image has `encoding`."""
    return hasattr(msg, "format") and not hasattr(msg, "encoding")


def image_msg_size(msg: Any) -> tuple[int, int]:
    """(height, width) of either image message without decoding it: a raw image's header
    fields, a compressed image's file header (PIL reads no pixels before `load`)."""
    if not is_compressed_image(msg):
        return int(msg.height), int(msg.width)
    data = _as_bytes_array(msg.data).tobytes()
    try:
        with PILImage.open(io.BytesIO(data)) as img:
            width, height = img.size
    except (OSError, ValueError, SyntaxError) as e:
        raise ImageDecodeError(f"CompressedImage ({len(data)} bytes): no image header: {e}") from e
    return int(height), int(width)


def image_msg_to_frame(msg: Any, camera: str) -> CameraFrame:
    """Either image message → CameraFrame stamped with the header stamp."""
    rgb = decode_compressed_image(msg) if is_compressed_image(msg) else decode_image(msg)
    return CameraFrame(camera=camera, stamp_ns=header_stamp_ns(msg), image=rgb)


def encode_image(
    ns: MessageNamespace,
    rgb: np.ndarray,
    stamp_ns: int,
    frame_id: str,
    encoding: str = "rgb8",
    row_padding: int = 0,
) -> Any:
    """(H, W, 3) uint8 RGB → sensor_msgs/Image in rgb8, bgr8, rgba8, bgra8 or mono8,
    with `row_padding` extra bytes per row (exercises `step`)."""
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"encode_image: need (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}")
    if encoding == "rgb8":
        pixels = rgb
    elif encoding == "bgr8":
        pixels = rgb[..., ::-1]
    elif encoding in ("rgba8", "bgra8"):
        alpha = np.full(rgb.shape[:2] + (1,), 255, np.uint8)
        pixels = np.concatenate([rgb if encoding == "rgba8" else rgb[..., ::-1], alpha], axis=2)
    elif encoding == "mono8":
        luma = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
        pixels = np.clip(np.rint(luma), 0, 255).astype(np.uint8)[..., None]
    else:
        raise ValueError(f"encode_image: encoding {encoding!r} not supported for writing")
    h, w, c = pixels.shape
    rows = pixels.reshape(h, w * c)
    if row_padding:
        rows = np.concatenate([rows, np.zeros((h, row_padding), np.uint8)], axis=1)
    return ns.make(
        "sensor_msgs/msg/Image",
        header=make_header(ns, stamp_ns, frame_id),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=w * c + row_padding,
        data=np.ascontiguousarray(rows).reshape(-1),
    )


def encode_compressed_image(
    ns: MessageNamespace,
    rgb: np.ndarray,
    stamp_ns: int,
    frame_id: str,
    codec: str = "jpeg",
    quality: int = 90,
) -> Any:
    """(H, W, 3) uint8 RGB → sensor_msgs/CompressedImage (jpeg or png), with the format string
    image_transport writes ("rgb8; jpeg compressed bgr8")."""
    if codec not in ("jpeg", "png"):
        raise ValueError(f"encode_compressed_image: codec {codec!r} must be jpeg or png")
    buf = io.BytesIO()
    img = PILImage.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    if codec == "jpeg":
        img.save(buf, format="JPEG", quality=quality)
    else:
        img.save(buf, format="PNG")
    return ns.make(
        "sensor_msgs/msg/CompressedImage",
        header=make_header(ns, stamp_ns, frame_id),
        format=f"rgb8; {codec} compressed bgr8",
        data=np.frombuffer(buf.getvalue(), dtype=np.uint8),
    )


def frame_to_image_msg(ns: MessageNamespace, frame: CameraFrame, frame_id: str, **kw: Any) -> Any:
    return encode_image(ns, frame.image, frame.stamp_ns, frame_id, **kw)
