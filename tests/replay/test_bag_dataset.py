"""`blockplan dataset --from-bags`: a training set from recorded bags (replay/dataset.py).

Parity: `blockplan simulate` writes an episode's bag, `blockplan dataset` the simulator's own
samples of the same episode; the samples built from the bag (camera window, ego history and
perception through the runtime's replay, the future and the meta behaviour from the bag's
odometry) are the simulator's: the same frames, the same prompt tokens, the trajectory within
0.05 m (it is exact: the odometry holds the simulator's states), the same meta behaviour; the
sections a bag cannot label are marked unknown.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockplan.cli import main
from blockplan.sim.dataset import load_shard
from tests.optional import importorskip

importorskip("highway_env")

CAMERAS = ("front_left", "front", "front_right", "rear")
DURATION = "9.5"  # samples at 3.0 … 4.5 s (3 s of history, 5 s of future)


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    """(simulator data set, bag, bag data set) of one highway episode."""
    from blockplan.replay.dataset import build_bag_dataset

    root = tmp_path_factory.mktemp("bagdata")
    sim = root / "sim"
    args = ["dataset", "--scenario", "highway", "--episodes", "1", "--seed-base", "3"]
    args += ["--duration", DURATION, "--val-fraction", "0", "--test-fraction", "0"]
    assert main([*args, "--no-export", "--out", str(sim)]) == 0
    seed = json.loads((sim / "manifest.json").read_text())["episodes"][0]["seed"]
    bag = root / "bag"
    args = ["simulate", "--scenario", "highway", "--seed", str(seed), "--duration", DURATION]
    assert main([*args, "--out", str(bag)]) == 0
    return sim, bag, build_bag_dataset([bag], root / "from-bag")


def _shards(root):
    manifest = json.loads((root / "manifest.json").read_text())
    (entry,) = manifest["episodes"]
    return entry, load_shard(root / entry["shard"])


def test_bag_samples_are_the_simulators(episode):
    from blockplan.schema import SECTION_NAMES, default_schema
    from blockplan.train.examples import load_shards
    from blockplan.train.noising import NoiseLayout
    from blockplan.train.recipe import Recipe

    sim_dir, _, bag_dir = episode
    _, sim = _shards(sim_dir)
    entry, bag = _shards(bag_dir)
    # The simulator's sample grid; the 3.0 s sample's history reaches the bag's first
    # odometry message, whose acceleration the runtime cannot know: left out.
    np.testing.assert_array_equal(bag["stamp_ns"], [3_500_000_000, 4_000_000_000, 4_500_000_000])
    rows = [int(np.flatnonzero(sim["stamp_ns"] == s)[0]) for s in bag["stamp_ns"]]
    assert entry["lateral_from"] == {"lane_pose": 3, "trajectory": 0}
    # the camera window: the same stamps and pixels
    assert [str(c) for c in bag["camera_names"]] == list(CAMERAS)
    np.testing.assert_array_equal(bag["frame_stamps_ns"], sim["frame_stamps_ns"][rows])
    np.testing.assert_array_equal(bag["images"], sim["images"][rows])
    # the trajectory from the odometry
    assert np.abs(bag["future_xy"] - sim["future_xy"][rows]).max() < 0.05
    np.testing.assert_allclose(bag["waypoints"], sim["waypoints"][rows], atol=0.05)
    np.testing.assert_allclose(bag["future_speed"], sim["future_speed"][rows], atol=1e-3)
    for key in ("longitudinal", "lateral", "route_command"):
        np.testing.assert_array_equal(bag[key], sim[key][rows])
    # the perception topics
    np.testing.assert_allclose(bag["lane_pose"], sim["lane_pose"][rows], atol=1e-5)
    np.testing.assert_allclose(bag["lead"], sim["lead"][rows], atol=0.006)  # bag: 0.01 m
    np.testing.assert_array_equal(bag["lanes_beside"], sim["lanes_beside"][rows])
    np.testing.assert_allclose(bag["beside"], sim["beside"][rows], atol=1e-4)
    # what a bag cannot label is unknown, the rest known
    known = [n in ("future_meta_behavior", "trajectory") for n in SECTION_NAMES]
    np.testing.assert_array_equal(bag["known_sections"], np.tile(known, (3, 1)))
    assert "known_sections" not in sim
    # the tokens training reads: the same prompt, the same known answer sections
    recipe = Recipe.build("reference", CAMERAS, 2, schema=default_schema())
    a = load_shards(bag_dir, "train", recipe, with_images=False)
    b = load_shards(sim_dir, "train", recipe, with_images=False)
    np.testing.assert_array_equal(a.prompt_ids, b.prompt_ids[rows])
    section = NoiseLayout.from_scaffold(recipe.scaffold).section
    labelled = np.isin(
        section, [SECTION_NAMES.index(n) for n, k in zip(SECTION_NAMES, known, strict=True) if k]
    )
    np.testing.assert_array_equal(a.answer_ids[:, labelled], b.answer_ids[rows][:, labelled])
    assert not np.array_equal(a.answer_ids, b.answer_ids[rows])  # the explanations differ
    np.testing.assert_array_equal(a.known_sections, np.tile(known, (3, 1)))
    assert b.known_sections.all()
    batch = a.batch([0, 1])
    assert batch["known_sections"].shape == (2, len(SECTION_NAMES))
    assert "known_sections" not in b.batch([0, 1])  # all known: the loss as it always was


def test_resumes_and_reads_sqlite3(episode, tmp_path):
    """A rerun with the same bags keeps the verified shard; the same bag stored as sqlite3
    gives the same samples."""
    from blockplan.bags import BagWriter, open_bag_reader
    from blockplan.replay.dataset import BagDatasetError, BagDatasetParams, build_bag_dataset

    _, bag, bag_dir = episode
    entry, shard = _shards(bag_dir)
    stamp = (bag_dir / entry["shard"]).stat().st_mtime_ns
    build_bag_dataset([bag], bag_dir)
    assert (bag_dir / entry["shard"]).stat().st_mtime_ns == stamp
    with pytest.raises(BagDatasetError, match="other options"):
        build_bag_dataset([bag], bag_dir, options=BagDatasetParams(sample_period_s=1.0))
    db3 = tmp_path / "bag-db3"
    with open_bag_reader(bag) as reader, BagWriter(db3, storage="sqlite3") as writer:
        for record in reader.records():
            writer.write_raw(record.topic, record.msgtype, record.rawdata, record.log_time_ns)
    _, other = _shards(build_bag_dataset([db3], tmp_path / "from-db3"))
    for key in ("images", "future_xy", "ego_history", "stamp_ns", "lateral", "longitudinal"):
        np.testing.assert_array_equal(other[key], shard[key])
    # frames stored smaller: the tower's own resampling of the recorded ones
    from blockplan.train.examples import resize_images

    small = BagDatasetParams(image_size=(48, 80))
    _, resized = _shards(build_bag_dataset([db3], tmp_path / "small", options=small))
    assert resized["images"].shape == (3, 4, 2, 48, 80, 3)
    want = resize_images(shard["images"].reshape(-1, 96, 160, 3), (48, 80))
    np.testing.assert_array_equal(resized["images"].reshape(-1, 48, 80, 3), want)


def test_a_bag_without_odometry_is_a_one_line_error(tmp_path, capsys):
    from blockplan.bags import BagWriter, TypestoreMessages, encode_image
    from blockplan.replay.dataset import BagDatasetError, build_bag_dataset

    bag = tmp_path / "cameras-only"
    ns = TypestoreMessages()
    image = np.zeros((8, 8, 3), np.uint8)
    with BagWriter(bag) as writer:
        for k in range(3):
            stamp = 1_000_000_000 + k * 100_000_000
            writer.write("/camera/front/image_raw", encode_image(ns, image, stamp, "f"), stamp)
    with pytest.raises(BagDatasetError, match="no odometry on /odom") as e:
        build_bag_dataset([bag], tmp_path / "out")
    assert "\n" not in str(e.value)
    assert main(["dataset", "--from-bags", str(bag), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar, if any
    assert err.startswith("error: ") and "no odometry" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_simulator_options_do_not_go_with_bags(tmp_path, capsys):
    args = ["dataset", "--from-bags", "x", "--episodes", "2", "--out", str(tmp_path)]
    assert main(args) == 2
    assert "--from-bags takes no --episodes" in capsys.readouterr().err


def test_lateral_progress_from_the_lane_pose_and_from_the_path():
    from blockplan.replay.dataset import arc_offset, lane_progress

    # a lane change to the left: the offset rises to +2 m, jumps to -2 m (the next lane's
    # centre line) and rises to 0; lateral progress is the 4 m moved across
    offsets = np.concatenate([np.linspace(0, 1.9, 20), np.linspace(-2.0, 0, 21)])
    assert lane_progress(offsets) == pytest.approx(4.0, abs=0.15)
    assert lane_progress(np.full(10, 0.3)) == 0.0
    t = np.linspace(0.25, 5.0, 20)
    # straight road, 4 m to the left by the end (aligned again): a lane's width
    y = 4.0 * np.clip(t / 4.0, 0, 1) ** 2 * (3 - 2 * np.clip(t / 4.0, 0, 1))
    assert arc_offset(np.stack([20 * t, y], -1), 0.0) == pytest.approx(4.0, abs=0.1)
    # following a 100 m radius curve (0.5 rad over 50 m): nothing across the lanes
    r, ang = 100.0, 10 * t / 100.0
    curve = np.stack([r * np.sin(ang), r * (1 - np.cos(ang))], -1)
    assert abs(arc_offset(curve, float(ang[-1]))) < 0.05


@pytest.mark.slow
def test_training_on_bags_skips_the_unknown_sections(episode, tmp_path):
    """`blockplan train` on a set built from two bags runs, and the unknown sections add no
    loss (their per-section means are 0; the known ones train)."""
    import shutil

    from blockplan.replay.dataset import build_bag_dataset

    _, bag, _ = episode
    other = tmp_path / "bag-copy"
    shutil.copytree(bag, other)
    data = build_bag_dataset([bag, other], tmp_path / "data")
    out = tmp_path / "run"
    args = ["train", "--data", str(data), "--out", str(out), "--steps", "2"]
    assert main([*args, "--batch-size", "2", "--set", "log-every=1", "--save-every", "2"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("event") == "train"]
    assert len(steps) == 2
    for r in steps:
        assert r["ar/explanation"] == 0.0 and r["ar/critical_objects"] == 0.0
        assert r["ar/trajectory"] > 0.0
    assert (out / "best" / "model.safetensors").is_file()
