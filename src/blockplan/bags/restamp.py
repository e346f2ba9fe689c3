"""Rewriting the stamps of serialized ROS 2 messages (`blockplan play --restamp`), ROS-free.

A bag recorded yesterday can feed a node running on wall time when every stamp in it is
mapped onto now. Images and odometry (large, and stamped only in their leading header) are
patched in their CDR bytes; other messages are deserialized with the bag's typestore, every
`builtin_interfaces/Time` in them mapped, and serialized again. Zero stamps stay zero.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from blockplan.bags.io import BagRecord

_TIME_TYPE = "builtin_interfaces/msg/Time"


def cdr_header_stamp_ns(raw: bytes) -> int:
    """The header stamp of a CDR message whose first field is a std_msgs/Header."""
    fmt = "<iI" if raw[1] == 1 else ">iI"
    sec, nanosec = struct.unpack_from(fmt, raw, 4)
    return sec * 1_000_000_000 + nanosec


def with_header_stamp(raw: bytes, stamp_ns: int) -> bytes:
    fmt = "<iI" if raw[1] == 1 else ">iI"
    out = bytearray(raw)
    struct.pack_into(fmt, out, 4, *divmod(int(stamp_ns), 1_000_000_000))
    return bytes(out)


def shifted(msg: Any, shift: Callable[[int], int]) -> Any:
    """`msg` with every Time mapped through `shift` (ns → ns); zero stamps stay zero."""
    if getattr(msg, "__msgtype__", None) == _TIME_TYPE:
        ns = msg.sec * 1_000_000_000 + msg.nanosec
        if ns == 0:
            return msg
        sec, nanosec = divmod(shift(ns), 1_000_000_000)
        return dataclasses.replace(msg, sec=int(sec), nanosec=int(nanosec))
    if dataclasses.is_dataclass(msg):
        changes = {}
        for f in dataclasses.fields(msg):
            value = getattr(msg, f.name)
            if dataclasses.is_dataclass(value) or isinstance(value, list):
                changes[f.name] = shifted(value, shift)
        return dataclasses.replace(msg, **changes) if changes else msg
    if isinstance(msg, list):
        return [shifted(item, shift) for item in msg]
    return msg


# Types whose first field is a std_msgs/Header and that hold no other Time.
HEADER_ONLY_TYPES = frozenset(
    {
        "sensor_msgs/msg/Image",
        "sensor_msgs/msg/CompressedImage",
        "sensor_msgs/msg/CameraInfo",
        "sensor_msgs/msg/Imu",
        "sensor_msgs/msg/NavSatFix",
        "sensor_msgs/msg/PointCloud2",
        "sensor_msgs/msg/LaserScan",
        "nav_msgs/msg/Odometry",
    }
)


class Restamper:
    """Rewrites the stamps of serialized messages: the header of a `HEADER_ONLY_TYPES`
    message (images, odometry) is patched in the CDR bytes; other messages are deserialized,
    every Time in them shifted, and serialized again."""

    def __init__(self, reader: Any, shift: Callable[[int], int]) -> None:
        self.reader, self.shift = reader, shift

    def __call__(self, record: BagRecord) -> bytes:
        if record.msgtype in HEADER_ONLY_TYPES:
            stamp = cdr_header_stamp_ns(record.rawdata)
            return with_header_stamp(record.rawdata, self.shift(stamp) if stamp else 0)
        msg = shifted(self.reader.deserialize(record), self.shift)
        return bytes(self.reader.typestore.serialize_cdr(msg, record.msgtype))
