"""Bag writing and reading: round trips in mcap and sqlite3, an independent mcap reader,
QoS metadata, clean close on failure and durability after flush."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from mcap.exceptions import McapError
from mcap.reader import NonSeekingReader, make_reader
from mcap_ros2.decoder import DecoderFactory

from blockplan.bags import (
    BagError,
    BagWriter,
    StaticFrame,
    TypestoreMessages,
    decode_image,
    ego_to_odometry,
    encode_image,
    odometry_to_ego,
    open_bag_reader,
    path_to_arrays,
    static_frames_to_tf,
    trajectory_to_path,
)
from blockplan.types import EgoState, Trajectory

NS = TypestoreMessages()
SRC = Path(__file__).resolve().parents[2] / "src"


def _traj(stamp: int) -> Trajectory:
    t = np.arange(1, 21) * 0.25
    z = np.zeros(20)
    return Trajectory(stamp, t, 2.0 * t, z, z, np.full(20, 2.0), z, z)


def _write_sample(bag: BagWriter, num_ticks: int = 5) -> np.ndarray:
    rgb = np.random.default_rng(1).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    bag.write("/tf_static", static_frames_to_tf(NS, [StaticFrame("cam", (1, 0, 1))], 0), 1)
    for i in range(num_ticks):
        stamp = 1_000_000_000 + i * 100_000_000
        bag.write("/camera/front/image_raw", encode_image(NS, rgb, stamp, "cam", "bgr8", 2), stamp)
        ego = EgoState(stamp, x=0.2 * i, y=0.0, yaw=0.0, v_x=2.0)
        bag.write("/odom", ego_to_odometry(NS, ego), stamp)
        bag.write("/planning/trajectory", trajectory_to_path(NS, _traj(stamp)), stamp + 1)
    return rgb


@pytest.mark.parametrize(
    "name,storage",
    [("out.mcap", "mcap"), ("out.db3", "sqlite3"), ("outdir", "mcap"), ("outdir3", "sqlite3")],
)
def test_round_trip_with_rosbags(tmp_path: Path, name: str, storage: str) -> None:
    path = tmp_path / name
    with BagWriter(path, storage=storage) as bag:
        rgb = _write_sample(bag)
    assert path.is_file() == (name.endswith((".mcap", ".db3")))
    assert not list(tmp_path.glob(".*partial"))
    with open_bag_reader(path) as reader:
        assert reader.topics["/odom"].msgtype == "nav_msgs/msg/Odometry"
        assert reader.topics["/planning/trajectory"].num_messages == 5
        assert reader.num_messages == 16
        images = [m for _, m in reader.messages(["/camera/front/image_raw"])]
        odoms = [odometry_to_ego(m) for _, m in reader.messages(["/odom"])]
        times = [r.log_time_ns for r in reader.records()]
    assert times == sorted(times)
    assert len(images) == 5
    np.testing.assert_array_equal(decode_image(images[0]), rgb)
    assert [o.x for o in odoms] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])


def test_independent_mcap_reader_decodes_everything(tmp_path: Path) -> None:
    path = tmp_path / "plans.mcap"
    with BagWriter(path) as bag:
        _write_sample(bag)
    with path.open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        channels = {c.topic: c for c in summary.channels.values()}
        schemas = {s.id: s.name for s in summary.schemas.values()}
        assert schemas[channels["/planning/trajectory"].schema_id] == "nav_msgs/msg/Path"
        # rosbag2 v8 QoS enums (rmw numbering): durability 1 = transient local,
        # reliability 1 = reliable, 2 = best effort.
        qos = {
            t: yaml.safe_load(c.metadata["offered_qos_profiles"])[0] for t, c in channels.items()
        }
        assert qos["/tf_static"]["durability"] == 1 and qos["/tf_static"]["depth"] == 1
        assert qos["/camera/front/image_raw"]["reliability"] == 2
        assert qos["/planning/trajectory"]["reliability"] == 1
        paths = list(reader.iter_decoded_messages(topics=["/planning/trajectory"]))
    assert len(paths) == 5
    _, _, message, decoded = paths[2]
    assert message.log_time == 1_200_000_001
    assert decoded.header.frame_id == "base_link"
    assert len(decoded.poses) == 20
    assert decoded.poses[-1].pose.position.x == pytest.approx(10.0)
    _, t, xy, _ = path_to_arrays(decoded)  # the duck-typed reader works on mcap_ros2 objects too
    assert t[0] == pytest.approx(0.25) and xy[-1, 0] == pytest.approx(10.0)


def test_bag_is_closed_and_readable_when_the_caller_fails(tmp_path: Path) -> None:
    path = tmp_path / "plans.mcap"
    with pytest.raises(RuntimeError, match="planner exploded"), BagWriter(path) as bag:
        _write_sample(bag, num_ticks=3)
        raise RuntimeError("planner exploded")
    with open_bag_reader(path) as reader:
        assert reader.topics["/planning/trajectory"].num_messages == 3


def test_flushed_messages_survive_a_killed_process(tmp_path: Path) -> None:
    """The process dies (os._exit, no finally) after flush: the flushed part is readable."""
    path = tmp_path / "plans.mcap"
    script = textwrap.dedent(f"""
        import os, numpy as np
        from blockplan.bags import BagWriter, TypestoreMessages, string_msg
        ns = TypestoreMessages()
        bag = BagWriter({str(path)!r})
        for i in range(7):
            bag.write("/planning/reasoning", string_msg(ns, f"tick {{i}}"), 1000 + i)
        bag.flush()
        bag.write("/planning/reasoning", string_msg(ns, "lost"), 2000)
        print(bag.storage_file, flush=True)
        os._exit(3)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    partial = Path(proc.stdout.strip())
    assert partial.is_file() and not path.exists()
    texts = []
    with partial.open("rb") as f:
        reader = NonSeekingReader(f, decoder_factories=[DecoderFactory()])
        try:
            for _, _, _, decoded in reader.iter_decoded_messages(log_time_order=False):
                texts.append(decoded.data)
        except (McapError, EOFError):
            pass  # the file ends where the process died: no footer, as expected
    assert texts == [f"tick {i}" for i in range(7)]


def test_writer_errors_are_typed(tmp_path: Path) -> None:
    path = tmp_path / "a.mcap"
    with BagWriter(path) as bag:
        bag.write("/t", NS.make("std_msgs/msg/String", data="x"), 1)
        with pytest.raises(BagError, match="has type std_msgs/msg/String"):
            bag.write("/t", NS.make("std_msgs/msg/Header"), 2)
        with pytest.raises(BagError, match="log_time_ns=-1"):
            bag.write("/t", NS.make("std_msgs/msg/String", data="x"), -1)
    with pytest.raises(BagError, match="write after close"):
        bag.write("/t", NS.make("std_msgs/msg/String", data="x"), 3)
    bag.close()  # idempotent
    with pytest.raises(BagError, match="exists already"):
        BagWriter(path)
    with pytest.raises(BagError, match="does not fit storage"):
        BagWriter(tmp_path / "b.db3", storage="mcap")
    with pytest.raises(BagError, match="storage='rosbag1'"):
        BagWriter(tmp_path / "c", storage="rosbag1")


def test_reader_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(BagError, match="no such bag"), open_bag_reader(tmp_path / "missing.mcap"):
        pass
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file at all")
    with pytest.raises(BagError, match="cannot open"), open_bag_reader(junk):
        pass


def test_corrupt_payload_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.mcap"
    with BagWriter(path) as bag:
        bag.write_raw("/odom", "nav_msgs/msg/Odometry", b"\x00\x01\x00\x00xx", 5)
    with open_bag_reader(path) as reader:
        (record,) = list(reader.records())
        with pytest.raises(
            BagError, match=r"cannot deserialize nav_msgs/msg/Odometry on /odom at 5"
        ):
            reader.deserialize(record)
