"""Bag round trip: `blockplan simulate` writes a bag that independent readers decode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockplan.cli import main
from blockplan.sim.topics import (
    GT_LABELS_TOPIC,
    GT_PATH_TOPIC,
    LANE_POSE_TOPIC,
    LEAD_TOPIC,
    ODOM_TOPIC,
    ROUTE_TOPIC,
    TF_STATIC_TOPIC,
    TF_TOPIC,
    TOPIC_TYPES,
    camera_topic,
)
from tests.optional import importorskip

CAMERAS = ("front_left", "front", "front_right", "rear")


def _simulate(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "bag"
    args = ["simulate", "--scenario", "merge", "--duration", "1.0", "--seed", "3"]
    assert main([*args, "--out", str(out), *extra]) == 0
    return out


def test_mcap_bag_decodes_with_the_independent_mcap_reader(tmp_path, capsys) -> None:
    mcap_reader = importorskip("mcap.reader")
    decoder = importorskip("mcap_ros2.decoder")
    out = _simulate(tmp_path)
    report = json.loads(capsys.readouterr().out)
    files = list(out.glob("*.mcap"))
    assert len(files) == 1 and (out / "metadata.yaml").is_file()
    counts: dict[str, int] = {}
    types: dict[str, str] = {}
    first: dict[str, object] = {}
    leads: dict[tuple[int, int], object] = {}
    labels = []
    with files[0].open("rb") as f:
        reader = mcap_reader.make_reader(f, decoder_factories=[decoder.DecoderFactory()])
        for schema, channel, _message, msg in reader.iter_decoded_messages():
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
            types[channel.topic] = schema.name
            first.setdefault(channel.topic, msg)
            if channel.topic == LEAD_TOPIC:
                leads[(msg.header.stamp.sec, msg.header.stamp.nanosec)] = msg
            elif channel.topic == GT_LABELS_TOPIC:
                labels.append(json.loads(msg.data))
    assert counts == report["message_counts"]
    for topic, msgtype in TOPIC_TYPES.items():
        assert types[topic] == msgtype
    # 1 s at 20 Hz odometry (t = 0..1 inclusive) and 10 Hz cameras
    assert counts[ODOM_TOPIC] == 21 and counts[TF_TOPIC] == 21 and counts[TF_STATIC_TOPIC] == 1
    # The lane pose with every odometry message, in the lane frame (an offset within the
    # lane, a rotation about z only).
    lane = first[LANE_POSE_TOPIC]
    assert counts[LANE_POSE_TOPIC] == 21 and lane.header.frame_id == "lane"
    assert lane.pose.position.x == 0.0 and abs(lane.pose.position.y) < 2.0
    assert lane.pose.orientation.x == 0.0 and lane.pose.orientation.y == 0.0
    stamp, odom = lane.header.stamp, first[ODOM_TOPIC].header.stamp
    assert (stamp.sec, stamp.nanosec) == (odom.sec, odom.nanosec)
    # The car ahead with every odometry message (the tracker), in base_link: at every camera
    # tick the same car the label's facts name (rounded there to 0.01), or none (inf).
    assert counts[LEAD_TOPIC] == 21
    lead = first[LEAD_TOPIC]
    assert lead.header.frame_id == "base_link" and lead.child_frame_id == "lead_vehicle"
    seen_car = False
    for record in labels:
        sec, nsec = divmod(record["stamp_ns"], 1_000_000_000)
        msg = leads[(sec, nsec)]
        gap, speed = msg.pose.pose.position.x, msg.twist.twist.linear.x
        if "lead_gap_m" in record["facts"]:
            seen_car = True
            assert gap == pytest.approx(record["facts"]["lead_gap_m"], abs=0.006)
            assert speed == pytest.approx(record["facts"]["lead_speed"], abs=0.006)
        else:
            assert gap == float("inf") and speed == 0.0
    assert seen_car  # merge seed 3 has a car ahead in the lane
    for cam in CAMERAS:
        topic = camera_topic(cam)
        assert types[topic] == "sensor_msgs/msg/Image" and counts[topic] == 11
        img = first[topic]
        assert (img.height, img.width, img.encoding) == (96, 160, "rgb8")
        assert img.header.frame_id == f"camera_{cam}_optical"
        assert len(img.data) == img.step * img.height
    assert counts[GT_PATH_TOPIC] == 11 and counts[GT_LABELS_TOPIC] == 11
    # The router's path with every camera tick, in odom: from 10 m behind the ego to 120 m
    # ahead, through the ego's lane centre.
    route = first[ROUTE_TOPIC]
    assert counts[ROUTE_TOPIC] == 11 and route.header.frame_id == "odom"
    assert len(route.poses) == 66
    odom_now = first[ODOM_TOPIC].pose.pose.position
    xy = np.array([[p.pose.position.x, p.pose.position.y] for p in route.poses])
    nearest = np.linalg.norm(xy - [odom_now.x, odom_now.y], axis=1)
    assert nearest.min() < 2.5 and int(np.argmin(nearest)) == 5
    path = first[GT_PATH_TOPIC]
    assert len(path.poses) == 20 and path.header.frame_id == "base_link"
    label = json.loads(first[GT_LABELS_TOPIC].data)
    assert np.allclose(
        [[p.pose.position.x, p.pose.position.y] for p in path.poses][3::4],
        label["answer"]["waypoints"],
        atol=1e-2,
    )
    assert label["answer_text"].startswith('{"critical_objects"')
    static = first[TF_STATIC_TOPIC]
    children = {t.child_frame_id for t in static.transforms}
    assert {f"camera_{c}_optical" for c in CAMERAS} <= children
    odom = first[ODOM_TOPIC]
    assert odom.header.frame_id == "odom" and odom.child_frame_id == "base_link"


def test_sqlite3_compressed_bag_reads_back_with_rosbags(tmp_path, capsys) -> None:
    from blockplan.bags import decode_compressed_image, open_bag_reader

    out = _simulate(tmp_path, "--storage", "sqlite3", "--compressed")
    capsys.readouterr()
    assert list(out.glob("*.db3"))
    with open_bag_reader(out) as reader:
        topic = camera_topic("front", compressed=True)
        msgs = [m for _, m in reader.messages([topic])]
    assert len(msgs) == 11
    rgb = decode_compressed_image(msgs[0])
    assert rgb.shape == (96, 160, 3)


def test_unknown_scenario_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--scenario", "moon", "--out", str(tmp_path / "b")])


def test_the_lanes_beside_in_the_bag_are_the_logs(tmp_path, highway_log) -> None:
    """/perception/lanes_beside, once per odometry step: a Float64MultiArray with the
    labelled (side, field) layout that the independent mcap reader decodes, holding at each
    step the map's lane counts and the cars beside `log_lanes_beside` computes from the log
    (the data sets' `lanes_beside` and `beside`); the highway has cars in the lines beside."""
    mcap_reader = importorskip("mcap.reader")
    decoder = importorskip("mcap_ros2.decoder")
    from blockplan.bags import beside_from_msg
    from blockplan.sim.bag import DEFAULT_START_NS, write_episode_bag
    from blockplan.sim.labels import log_lanes_beside
    from blockplan.sim.rig import load_rig
    from blockplan.sim.topics import BESIDE_TOPIC

    write_episode_bag(highway_log, load_rig(), tmp_path / "bag", 6.0)
    (path,) = (tmp_path / "bag").glob("*.mcap")
    got: dict[int, np.ndarray] = {}
    with path.open("rb") as f:
        reader = mcap_reader.make_reader(f, decoder_factories=[decoder.DecoderFactory()])
        for schema, _channel, message, msg in reader.iter_decoded_messages([BESIDE_TOPIC]):
            assert schema.name == "std_msgs/msg/Float64MultiArray"
            assert [(d.label, d.size) for d in msg.layout.dim] == [("side", 2), ("field", 5)]
            got[message.log_time - DEFAULT_START_NS] = beside_from_msg(msg)
    assert len(got) == 121  # 6 s at 20 Hz, both ends
    cars = 0
    for i in range(121):
        want = log_lanes_beside(highway_log, i)
        have = got[round(highway_log.t[i] * 1e9)]
        speeds = np.isinf(want[:, [1, 3]])  # no car: the speed is written as 0
        want[:, [2, 4]] = np.where(speeds, 0.0, want[:, [2, 4]])
        np.testing.assert_allclose(have, want)
        cars += int(np.isfinite(want[:, [1, 3]]).sum())
    assert cars > 0
