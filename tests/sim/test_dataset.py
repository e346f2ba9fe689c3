from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import blockplan.sim.dataset_writer as writer_mod
from blockplan.sim.dataset import (
    MANIFEST,
    DatasetError,
    DatasetOptions,
    iter_split,
    load_shard,
    split_of,
)
from blockplan.sim.dataset_writer import DatasetWriter
from blockplan.sim.fastddrive import read_fastddrive_json
from blockplan.sim.rig import load_rig
from blockplan.types import Observation


def test_split_is_a_function_of_the_seed_only() -> None:
    splits = {seed: split_of(seed, 0.1, 0.1) for seed in range(2000)}
    assert splits == {seed: split_of(seed, 0.1, 0.1) for seed in range(2000)}
    shares = {s: sum(v == s for v in splits.values()) / 2000 for s in ("train", "val", "test")}
    assert 0.07 < shares["val"] < 0.13 and 0.07 < shares["test"] < 0.13


def test_options_are_validated() -> None:
    with pytest.raises(DatasetError, match="duration"):
        DatasetOptions(scenarios=("merge",), episodes=1, duration_s=6.0)
    with pytest.raises(DatasetError, match="val_fraction"):
        DatasetOptions(
            scenarios=("merge",), episodes=1, duration_s=9.0, val_fraction=0.9, test_fraction=0.2
        )


@pytest.fixture
def crash_seed_zero(monkeypatch):
    """Seed 0 'crashes' (the expert's collision is simulated by marking the log)."""
    real = writer_mod.run_episode

    def run(scenario, seed, duration_s, perturbations=()):
        log = real(scenario, seed, duration_s, perturbations)
        return dataclasses.replace(log, crashed_at=1.0) if seed == 0 else log

    monkeypatch.setattr(writer_mod, "run_episode", run)


def test_dataset_end_to_end_drops_crashes_and_resumes(tmp_path, crash_seed_zero) -> None:
    rig = load_rig()
    # val/test fractions chosen so seeds 1 and 2 land in different splits
    options = DatasetOptions(
        scenarios=("merge",), episodes=2, duration_s=8.0, val_fraction=0.45, test_fraction=0.45
    )
    manifest = DatasetWriter(tmp_path, options, rig).run()
    assert [d["seed"] for d in manifest["dropped"]] == [0]
    assert manifest["counts"]["dropped_crashes"] == {"merge": 1}
    assert manifest["counts"]["dropped_reversing"] == {"merge": 0}
    kept = manifest["episodes"]
    assert [e["seed"] for e in kept] == [1, 2]
    seeds_by_split: dict[str, set[int]] = {}
    for e in kept:
        assert e["split"] == split_of(e["seed"], 0.45, 0.45)
        seeds_by_split.setdefault(e["split"], set()).add(e["seed"])
        shard = load_shard(tmp_path / e["shard"])
        n = e["num_samples"]
        assert n == 1  # t0 = 3.0: 3 s of history behind, 5 s of future ahead
        assert shard["images"].shape == (n, 4, 2, 96, 160, 3)
        assert shard["waypoints"].shape == (n, 5, 2) and shard["future_xy"].shape == (n, 20, 2)
        assert shard["ego_history"].shape == (n, 7, 6)
        assert shard["critical"].shape == (n, 12)
    all_seeds = [s for seeds in seeds_by_split.values() for s in seeds]
    assert len(all_seeds) == len(set(all_seeds))  # no seed in two splits

    split = kept[0]["split"]
    obs, answer = next(iter_split(tmp_path, split))
    assert isinstance(obs, Observation) and len(obs.frames) == 8
    assert [f.camera for f in obs.frames[:2]] == ["front_left", "front_left"]  # view-major
    assert (
        obs.frames[0].stamp_ns < obs.frames[1].stamp_ns
        and obs.ego_history[-1].stamp_ns == obs.stamp_ns
    )

    records = read_fastddrive_json(tmp_path / "fastddrive" / f"{split}.json")
    assert len(records) == 1
    assert all(p.is_file() for p in records[0].image_paths) and len(records[0].image_paths) == 8
    assert records[0].prompt.count("<image>") == 8
    assert np.allclose(records[0].answer.waypoints, answer.waypoints, atol=1e-3)
    assert records[0].answer.lateral == answer.lateral

    # resume: a second run does nothing new; an unlisted episode is redone
    before = json.loads((tmp_path / MANIFEST).read_text())
    again = DatasetWriter(tmp_path, options, rig).run()
    assert again["episodes"] == before["episodes"] and again["dropped"] == before["dropped"]
    before["episodes"] = before["episodes"][:1]
    (tmp_path / MANIFEST).write_text(json.dumps(before))
    redone = DatasetWriter(tmp_path, options, rig).run()
    assert [e["seed"] for e in redone["episodes"]] == [1, 2]
    assert redone["episodes"][1]["sha256"] == kept[1]["sha256"]  # deterministic

    with pytest.raises(DatasetError, match=r"other options: sample_period_s .* \(now 1\.0\);"):
        DatasetWriter(tmp_path, dataclasses.replace(options, sample_period_s=1.0), rig)
    # The default start is not written, so data sets from before the option still resume;
    # another start is another data set.
    assert "start_s" not in before["options"] and "perturb_every_s" not in before["options"]
    with pytest.raises(DatasetError, match="options"):
        DatasetWriter(tmp_path, dataclasses.replace(options, start_s=0.0), rig)


@pytest.mark.slow
def test_worker_processes_give_the_same_data_set(tmp_path) -> None:
    rig = load_rig()
    options = DatasetOptions(scenarios=("merge", "roundabout"), episodes=2, duration_s=8.0)
    one = DatasetWriter(tmp_path / "one", options, rig, export_fastddrive=False).run()
    two = DatasetWriter(tmp_path / "two", options, rig, export_fastddrive=False, workers=2).run()
    assert one["episodes"] == two["episodes"] and one["dropped"] == two["dropped"]


def test_an_expert_that_backs_up_is_dropped(monkeypatch, tmp_path) -> None:
    """highway-env's IDM reverses behind a stopped car; such an episode is no demonstration."""
    real = writer_mod.run_episode

    def run(scenario, seed, duration_s, perturbations=()):
        log = real(scenario, seed, duration_s, perturbations)
        if seed == 0:
            log.ego[60:, writer_mod.EGO_SPEED] = -1.0  # backs up from t = 3 s
        return log

    monkeypatch.setattr(writer_mod, "run_episode", run)
    options = DatasetOptions(scenarios=("merge",), episodes=1, duration_s=8.0)
    manifest = DatasetWriter(tmp_path, options, load_rig(), export_fastddrive=False).run()
    assert manifest["dropped"] == [{"scenario": "merge", "seed": 0, "reversed_at": 3.0}]
    assert [e["seed"] for e in manifest["episodes"]] == [1]
    assert manifest["counts"]["dropped_reversing"] == {"merge": 1}


def test_samples_whose_future_backs_up_are_left_out(highway_log) -> None:
    from blockplan.sim.dataset import forward_times
    from blockplan.sim.episode import EGO_SPEED

    log = dataclasses.replace(highway_log, ego=highway_log.ego.copy())
    log.ego[log.index_at(9.0) :, EGO_SPEED] = -0.6  # backs up from t = 9 s
    times = np.arange(3.0, 7.01, 0.5)
    np.testing.assert_array_equal(forward_times(log, times), [3.0, 3.5])  # futures end < 9 s
    log.ego[log.index_at(9.0) :, EGO_SPEED] = -0.2  # a creep at a stop is no reversing
    np.testing.assert_array_equal(forward_times(log, times), times)


def test_samples_whose_future_was_perturbed_are_left_out(highway_log) -> None:
    from blockplan.sim.dataset import clean_times

    times = np.arange(3.0, 7.01, 0.5)
    np.testing.assert_array_equal(clean_times(highway_log, times), times)  # unperturbed
    perturbed = np.zeros(highway_log.num_steps, dtype=bool)
    perturbed[highway_log.index_at(9.0) : highway_log.index_at(9.5)] = True
    log = dataclasses.replace(highway_log, perturbed=perturbed)
    # the action at 9 s first moves the state at 9.05 s: a future ending at 9 s is clean,
    # any later one is out; the history may hold the perturbation
    np.testing.assert_array_equal(clean_times(log, times), [3.0, 3.5, 4.0])
    perturbed[:] = False
    perturbed[highway_log.index_at(2.0) : highway_log.index_at(2.5)] = True
    np.testing.assert_array_equal(clean_times(log, times), times)


def test_perturbed_episodes_keep_only_samples_the_expert_drove(tmp_path) -> None:
    from blockplan.sim.dataset import episode_perturbations
    from blockplan.sim.scenarios import SIM_HZ

    options = DatasetOptions(
        scenarios=("highway",), episodes=1, duration_s=14.0, perturb_every_s=3.0
    )
    with pytest.raises(DatasetError, match="perturb_every"):
        dataclasses.replace(options, perturb_every_s=0.0)
    assert episode_perturbations(dataclasses.replace(options, perturb_every_s=None), 0) == ()
    events = episode_perturbations(options, 0)
    assert events
    manifest = DatasetWriter(tmp_path, options, load_rig()).run()
    assert manifest["options"]["perturb_every_s"] == 3.0
    (entry,) = manifest["episodes"]
    assert entry["seed"] == 0
    kept = load_shard(tmp_path / entry["shard"])["stamp_ns"] / 1e9
    # The expected samples: every 0.5 s from 3 s whose 5 s future holds no perturbed step.
    dt = 1.0 / SIM_HZ
    acted = [
        j * dt for j in range(int(round(14.0 * SIM_HZ))) if any(e.covers(j * dt) for e in events)
    ]
    expected = [
        t0
        for t0 in np.arange(3.0, 9.0 + 1e-9, 0.5)
        if not any(round(t0 / dt) <= round(x / dt) < round((t0 + 5.0) / dt) for x in acted)
    ]
    assert 0 < len(expected) < 13  # some futures were perturbed, some not
    np.testing.assert_allclose(kept, expected, atol=1e-6)


def test_samples_from_the_start_of_the_recording_see_what_the_runtime_sees(highway_log) -> None:
    """`start_s=0`: the first sample is the hand-over instant. Its history holds only the
    recorded states, so the prompt rows before t = 0 continue the first state backwards
    (`ego_history_array`, as the node does at start-up), and the oldest frame pads the
    window (the frame buffer's `is_padded`)."""
    from blockplan.schema import default_schema
    from blockplan.schema.prompt import ego_history_array
    from blockplan.sim.dataset import episode_samples, sample_observation
    from blockplan.sim.labels import ego_state

    options = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0, start_s=0.0)
    arrays, _ = episode_samples(highway_log, load_rig(), options)
    assert arrays["stamp_ns"][0] == 0
    np.testing.assert_array_equal(arrays["frame_stamps_ns"][0], [0, 0])
    np.testing.assert_array_equal(arrays["images"][0][:, 0], arrays["images"][0][:, 1])
    obs = sample_observation(arrays, 0)
    assert {s.stamp_ns for s in obs.ego_history} == {0}
    schema = default_schema()
    only_now = ego_history_array([ego_state(highway_log, 0)], 0, schema)
    np.testing.assert_allclose(arrays["ego_history"][0], only_now, atol=1e-5)
    assert np.all(np.diff(only_now[:, 0]) > 0)  # moving: the rows before t = 0 lie behind
    later = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0)
    first, _ = episode_samples(highway_log, load_rig(), later)
    assert first["stamp_ns"][0] == 3_000_000_000  # the default waits for a full history
    with pytest.raises(DatasetError, match="start"):
        DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0, start_s=-1.0)


def test_every_sample_records_the_lead_car_the_labels_see(highway_log) -> None:
    """The lead probe's target is the labels' gap to the nearest car ahead in the ego's lane
    and that car's speed at t0 ((inf, NaN) without one); training examples read it."""
    from blockplan.sim.dataset import episode_samples
    from blockplan.sim.labels import label_at

    options = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0)
    arrays, _ = episode_samples(highway_log, load_rig(), options)
    lead = arrays["lead"]
    assert lead.shape == (len(arrays["stamp_ns"]), 2) and lead.dtype == np.float32
    for row, stamp in zip(lead, arrays["stamp_ns"], strict=True):
        facts = label_at(highway_log, stamp / 1e9).facts
        if "lead_gap_m" in facts:
            np.testing.assert_allclose(row, [facts["lead_gap_m"], facts["lead_speed"]], rtol=1e-6)
        else:
            assert np.isinf(row[0]) and np.isnan(row[1])
    assert np.isfinite(lead[:, 0]).any()  # highway traffic: a car ahead at some point


def test_every_sample_records_the_lane_pose_at_its_instant(highway_log) -> None:
    """The training-only lane-pose target is the log's lane pose at t0, and the training
    examples read it (an older shard without it reads as unknown, NaN)."""
    from blockplan.sim.dataset import episode_samples

    options = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0)
    arrays, _ = episode_samples(highway_log, load_rig(), options)
    at = [highway_log.index_at(s / 1e9) for s in arrays["stamp_ns"]]
    assert arrays["lane_pose"].shape == (len(at), 2)
    np.testing.assert_allclose(arrays["lane_pose"], highway_log.lane_pose[at], atol=1e-6)


def test_every_sample_records_the_lanes_beside_the_ego(highway_log) -> None:
    """`lanes_beside`: how many lanes the ego's road has to its left and to its right at t0
    (what a map gives; lane id 0 is the leftmost), from the lane the simulator assigns. A
    lane change to the left moves one lane from the left count to the right count."""
    from blockplan.sim.dataset import episode_samples

    options = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0)
    arrays, _ = episode_samples(highway_log, load_rig(), options)
    beside = arrays["lanes_beside"]
    assert beside.shape == (len(arrays["stamp_ns"]), 2) and beside.dtype == np.float32
    (road,) = highway_log.road.roads  # the highway is one road of parallel lanes
    for row, stamp in zip(beside, arrays["stamp_ns"], strict=True):
        lane = highway_log.ego_lane[highway_log.index_at(stamp / 1e9)]
        assert tuple(row) == (lane[2], road[2] - 1 - lane[2])
    assert len({tuple(row) for row in beside}) > 1  # this episode changes lanes
    assert np.isnan(highway_log.road.lanes_beside(("no", "road", 0))).all()  # unknown road


def test_every_sample_records_the_cars_in_the_lanes_beside(highway_log) -> None:
    """`beside`: per side (left, right) the gap to the nearest car ahead and behind in the
    lane line beside the ego and their speeds, recomputed here from the log's boxes."""
    from blockplan.sim.dataset import episode_samples
    from blockplan.sim.labels import log_beside

    options = DatasetOptions(scenarios=("highway",), episodes=1, duration_s=12.0)
    arrays, _ = episode_samples(highway_log, load_rig(), options)
    beside = arrays["beside"]
    assert beside.shape == (len(arrays["stamp_ns"]), 2, 4) and beside.dtype == np.float32
    for row, stamp in zip(beside, arrays["stamp_ns"], strict=True):
        expected = log_beside(highway_log, highway_log.index_at(stamp / 1e9))
        np.testing.assert_allclose(row, expected.astype(np.float32))
    gaps = beside[..., [0, 2]]
    assert np.isfinite(gaps).any() and np.isinf(gaps).any()  # some lines beside hold cars
    assert (gaps[np.isfinite(gaps)] >= 0).all()
    speeds = beside[..., [1, 3]]
    assert (np.isnan(speeds) == np.isinf(gaps)).all()  # a speed exactly where a car is


def test_beside_vehicles_sorts_cars_into_sides_and_directions() -> None:
    """Ego at the origin heading +x: a car 10 m ahead 4 m to the left, one alongside on the
    right, one behind on the right, one in the ego's own line (not beside), one two lines
    over and one heading the other way (neither counts)."""
    from blockplan.sim.labels import beside_vehicles

    cars = np.array(
        [
            [10.0, 4.0, 0.0, 20.0],  # left, ahead
            [30.0, 4.0, 0.0, 25.0],  # left, farther ahead: not the nearest
            [0.5, -4.0, 0.0, 21.0],  # right, alongside (centre just ahead)
            [-12.0, -3.5, 0.0, 19.0],  # right, behind
            [8.0, 0.5, 0.0, 15.0],  # the ego's own line: the lead, not beside
            [5.0, 8.5, 0.0, 15.0],  # two lines to the left
            [-5.0, 4.0, np.pi, 15.0],  # oncoming
        ]
    )
    out = beside_vehicles(0.0, 0.0, 0.0, cars)
    np.testing.assert_allclose(out[0], [10.0, 20.0, np.inf, np.nan])
    np.testing.assert_allclose(out[1], [0.5, 21.0, 12.0, 19.0])
    # the same scene turned by 90 degrees about the ego gives the same report
    c, s = np.cos(np.pi / 2), np.sin(np.pi / 2)
    turned = cars.copy()
    turned[:, 0], turned[:, 1] = c * cars[:, 0] - s * cars[:, 1], s * cars[:, 0] + c * cars[:, 1]
    turned[:, 2] += np.pi / 2
    np.testing.assert_allclose(beside_vehicles(0.0, 0.0, np.pi / 2, turned), out, atol=1e-9)
