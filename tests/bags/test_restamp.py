"""Restamping serialized messages onto another clock (`blockplan play --restamp`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blockplan.bags import (
    BagWriter,
    StaticFrame,
    TypestoreMessages,
    encode_compressed_image,
    encode_image,
    header_stamp_ns,
    open_bag_reader,
    static_frames_to_tf,
    string_msg,
    trajectory_to_path,
)
from blockplan.bags.restamp import Restamper, cdr_header_stamp_ns, with_header_stamp
from blockplan.types import Trajectory

NS = TypestoreMessages()
T0 = 1_700_000_000 * 10**9
SHIFT = 123_456_789_000


def _bag(tmp_path: Path) -> Path:
    path = tmp_path / "in.mcap"
    image = np.zeros((4, 6, 3), np.uint8)
    t = np.array([0.5, 1.0])
    traj = Trajectory(T0, t, t, 0 * t, 0 * t, 0 * t + 1, 0 * t, 0 * t)
    with BagWriter(path) as bag:
        bag.write("/camera/front/image_raw", encode_image(NS, image, T0, "cam"), T0)
        bag.write(
            "/camera/front/image_raw/compressed",
            encode_compressed_image(NS, image, T0 + 1, "cam"),
            T0 + 1,
        )
        frames = [StaticFrame("cam", (1.0, 0.0, 1.5), (0.0, 0.0, 0.0))]
        bag.write("/tf_static", static_frames_to_tf(NS, frames, T0 + 2, "base_link"), T0 + 2)
        bag.write("/path", trajectory_to_path(NS, traj, "base_link"), T0 + 3)
        bag.write("/text", string_msg(NS, "no stamps here"), T0 + 4)
    return path


def test_every_stamp_moves_and_nothing_else(tmp_path: Path) -> None:
    with open_bag_reader(_bag(tmp_path)) as reader:
        restamp = Restamper(reader, lambda ns: ns + SHIFT)
        out = {}
        for record in reader.records():
            data = restamp(record)
            out[record.topic] = (record, reader.typestore.deserialize_cdr(data, record.msgtype))
    image_record, image = out["/camera/front/image_raw"]
    assert header_stamp_ns(image) == T0 + SHIFT
    assert image.header.frame_id == "cam" and image.data.shape == (4 * 6 * 3,)
    assert header_stamp_ns(out["/camera/front/image_raw/compressed"][1]) == T0 + 1 + SHIFT
    tf = out["/tf_static"][1]
    assert [header_stamp_ns(t) for t in tf.transforms] == [T0 + 2 + SHIFT]
    path = out["/path"][1]
    assert header_stamp_ns(path) == T0 + SHIFT
    assert [header_stamp_ns(p) for p in path.poses] == [
        T0 + SHIFT + 500_000_000,
        T0 + SHIFT + 1_000_000_000,
    ]
    assert out["/text"][1].data == "no stamps here"


def test_header_stamp_in_cdr_bytes(tmp_path: Path) -> None:
    with open_bag_reader(_bag(tmp_path)) as reader:
        record = next(reader.records(["/camera/front/image_raw"]))
    assert cdr_header_stamp_ns(record.rawdata) == T0
    patched = with_header_stamp(record.rawdata, T0 + 7)
    assert cdr_header_stamp_ns(patched) == T0 + 7 and len(patched) == len(record.rawdata)
