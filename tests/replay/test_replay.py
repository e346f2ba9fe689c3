"""Replay end to end on bags made here: outputs, metrics, and the robustness cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from blockplan.bags import BagWriter, TypestoreMessages, diagnostics_from_msg, string_msg
from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.replay import ReplayInputError, load_planner, run_replay
from blockplan.runtime import ConstantVelocityPlanner
from blockplan.types import Observation, Plan
from tests.replay.bagmaker import BagSpec, make_bag


def _decoded(path: Path, topic: str) -> list:
    with path.open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        return [(m.log_time, d) for _, _, m, d in reader.iter_decoded_messages(topics=[topic])]


def _replay(tmp_path: Path, spec: BagSpec, timing: str = "ideal", planner=None):
    bag = make_bag(tmp_path / "in.mcap", spec)
    return run_replay(
        bag, tmp_path / "out", planner or ConstantVelocityPlanner(), PlannerConfig(), timing
    )


def _check_output_bag(outputs, expected_ticks: int) -> None:
    """One Path per tick, every input topic copied, all readable by an independent reader."""
    paths = _decoded(outputs.plans_bag, "/planning/trajectory")
    assert len(paths) == outputs.metrics["ticks"]
    assert abs(outputs.metrics["ticks"] - expected_ticks) <= 2  # the loop kept its rate
    assert all(len(p.poses) == 20 and p.header.frame_id == "base_link" for _, p in paths)
    with outputs.plans_bag.open("rb") as f:
        topics = {c.topic for c in make_reader(f).get_summary().channels.values()}
    assert {"/odom", "/tf", "/tf_static", "/diagnostics", "/planning/reasoning"} <= topics
    assert "/planning/rollouts" in topics


def test_straight_drive_outputs_and_metrics(tmp_path: Path) -> None:
    outputs = _replay(tmp_path, BagSpec(duration_s=8.0, curvature=0.0))
    m = json.loads(outputs.metrics_json.read_text())
    for key in ("ticks", "plans", "fallbacks", "deadline_misses", "invalid_inputs"):
        assert isinstance(m[key], int)
    assert set(m["latency_ms"]) == {"p50", "p99"}
    assert m["fallbacks"] == 0 and m["plans"] == m["ticks"]
    # The constant-velocity baseline is exact on a straight road at constant speed.
    assert m["evaluated_plans"] >= 20
    for key in ("ade_3s", "ade_5s", "l2_1s", "l2_2s", "l2_3s"):
        assert m[key] == pytest.approx(0.0, abs=1e-3)
    for key in ("along_track_5s", "cross_track_5s", "along_track_bias_5s"):
        assert m[key] == pytest.approx(0.0, abs=1e-3)
    _check_output_bag(outputs, 79)
    reasoning = [json.loads(d.data) for _, d in _decoded(outputs.plans_bag, "/planning/reasoning")]
    assert len(reasoning) == m["plans"]
    assert reasoning[0]["meta_behavior"]["longitudinal"] == "keep"
    markers = _decoded(outputs.plans_bag, "/planning/rollouts")
    assert markers[0][1].markers[0].type == 4  # LINE_STRIP
    html = outputs.report_html.read_text()
    assert html.startswith("<!DOCTYPE html>") and "http" not in html.split("<body>")[1][:2000]
    assert {p.name for p in outputs.plots} == {"latency.png", "displacement.png"}


def test_curve_metrics_and_measured_timing(tmp_path: Path) -> None:
    outputs = _replay(tmp_path, BagSpec(duration_s=8.0, curvature=0.02, speed=6.0), "measured")
    m = outputs.metrics
    # Constant velocity on a circle: the lateral error grows as v² t² κ / 2 at short range.
    assert m["l2_1s"] == pytest.approx(0.5 * 36 * 0.02, rel=0.1)
    assert m["ade_5s"] > m["ade_3s"] > 0
    # Going straight where the road turns left is a path error (to the right of the
    # recorded path), not a speed error.
    assert m["cross_track_5s"] > 3 * m["along_track_5s"]
    assert m["plan_age_ms"]["p50"] > 100.0  # plans arrive one latency after their request
    assert m["timing"] == "measured"


def test_ground_truth_topic_scores_every_plan(tmp_path: Path) -> None:
    spec = BagSpec(duration_s=4.0, curvature=0.02, speed=6.0, with_ground_truth=True)
    outputs = _replay(tmp_path, spec)
    m = outputs.metrics
    # Odometry covers no 5 s future in a 4 s bag; the recorded paths do, for every plan.
    assert m["ground_truth"] == "/ground_truth/future_path"
    assert m["evaluated_plans"] == m["plans"] >= 35
    assert m["l2_1s"] == pytest.approx(0.5 * 36 * 0.02, rel=0.1)
    assert len(_decoded(outputs.plans_bag, "/ground_truth/future_path")) == 40


def _fallback_or_degraded(outputs) -> bool:
    degraded = [
        json.loads(d.data)["is_degraded"]
        for _, d in _decoded(outputs.plans_bag, "/planning/reasoning")
    ]
    return outputs.metrics["fallbacks"] > 0 or any(degraded)


def _diagnostic_levels(outputs, name: str) -> list[int]:
    levels = []
    for _, msg in _decoded(outputs.plans_bag, "/diagnostics"):
        levels += [s["level"] for s in diagnostics_from_msg(msg) if s["name"] == name]
    return levels


def test_camera_goes_silent(tmp_path: Path) -> None:
    outputs = _replay(tmp_path, BagSpec(duration_s=5.0, silent_camera="rear", silent_after_s=2))
    assert outputs.metrics["counters"]["degraded_requests"] >= 20
    assert _fallback_or_degraded(outputs)
    assert 1 in _diagnostic_levels(outputs, "blockplan: camera rear")  # WARN: stale
    _check_output_bag(outputs, 49)


@pytest.mark.parametrize(
    "spec,kind,count",
    [
        (
            BagSpec(duration_s=5.0, compressed=True, corrupt_jpeg_at={10, 11, 30}),
            "invalid_image",
            3,
        ),
        (BagSpec(duration_s=5.0, bad_length_at={10, 20}), "invalid_image", 2),
        (BagSpec(duration_s=5.0, unknown_encoding_at={15}), "invalid_image", 1),
        (BagSpec(duration_s=5.0, nan_odometry_at={12, 13, 25}), "odometry_nonfinite", 3),
        (BagSpec(duration_s=5.0, unstamped_image_at={5, 6}), "unstamped_image", 2),
        (BagSpec(duration_s=5.0, corrupt_odometry_at={7, 8, 9}), "corrupt_message", 3),
    ],
    ids=[
        "corrupt_jpeg",
        "data_length",
        "unknown_encoding",
        "nan_odometry",
        "unstamped",
        "corrupt_cdr",
    ],
)
def test_bad_inputs_are_counted_and_survived(tmp_path: Path, spec, kind, count) -> None:
    outputs = _replay(tmp_path, spec)
    m = outputs.metrics
    assert m["invalid_inputs"] == count and m["counters"][kind] == count
    assert 1 in _diagnostic_levels(outputs, "blockplan: inputs")
    _check_output_bag(outputs, 49)
    assert m["plans"] >= 40  # the loop went on planning around the bad inputs


def test_corrupt_jpeg_on_the_newest_frame_degrades(tmp_path: Path) -> None:
    spec = BagSpec(duration_s=5.0, compressed=True, corrupt_jpeg_at=set(range(20, 26)))
    outputs = _replay(tmp_path, spec)
    assert outputs.metrics["counters"]["degraded_requests"] >= 1
    assert _fallback_or_degraded(outputs)


def test_bag_loop_time_jump(tmp_path: Path) -> None:
    outputs = _replay(tmp_path, BagSpec(duration_s=8.0, loop_after_s=4.0))
    m = outputs.metrics
    assert m["counters"]["time_jumps"] == 1
    _check_output_bag(outputs, 78)
    loop_status = []
    for _, msg in _decoded(outputs.plans_bag, "/diagnostics"):
        loop_status += [s for s in diagnostics_from_msg(msg) if s["name"].endswith("control loop")]
    assert loop_status[-1]["values"]["time_jumps"] == "1"
    stamps = [p.header.stamp.sec for _, p in _decoded(outputs.plans_bag, "/planning/trajectory")]
    assert min(np.diff(stamps)) < -2  # the published stamps follow the loop back
    log_times = [t for t, _ in _decoded(outputs.plans_bag, "/planning/trajectory")]
    assert log_times == sorted(log_times)  # while the output bag stays in log-time order


def test_bag_without_cameras_names_the_missing_topics(tmp_path: Path) -> None:
    bag = tmp_path / "no_cameras.mcap"
    ns = TypestoreMessages()
    with BagWriter(bag) as writer:
        writer.write("/chatter", string_msg(ns, "hello"), 1)
    with pytest.raises(ReplayInputError, match=r"/camera/front_left/image_raw.*/chatter"):
        run_replay(bag, tmp_path / "out", ConstantVelocityPlanner(), PlannerConfig())
    assert (
        main(
            [
                "replay",
                str(bag),
                "--model",
                "constant-velocity",
                "--out",
                str(tmp_path / "cli"),
                "--no-progress",
            ]
        )
        == 1
    )


def test_output_stays_readable_when_replay_dies(tmp_path: Path) -> None:
    class DyingPlanner(ConstantVelocityPlanner):
        calls = 0

        def plan(self, observation: Observation) -> Plan:
            self.calls += 1
            if self.calls == 20:
                raise KeyboardInterrupt  # not an Exception: the worker does not catch it
            return super().plan(observation)

    with pytest.raises(KeyboardInterrupt):
        _replay(tmp_path, BagSpec(duration_s=5.0), planner=DyingPlanner())
    paths = _decoded(tmp_path / "out" / "plans.mcap", "/planning/trajectory")
    assert len(paths) == 19


@pytest.mark.parametrize("name,storage", [("in.db3", "sqlite3"), ("in_dir", "sqlite3")])
def test_sqlite3_and_directory_bags(tmp_path: Path, name: str, storage: str) -> None:
    bag = make_bag(tmp_path / name, BagSpec(duration_s=2.0), storage=storage)
    outputs = run_replay(bag, tmp_path / "out", ConstantVelocityPlanner(), PlannerConfig())
    assert outputs.metrics["plans"] >= 15
    _check_output_bag(outputs, 19)


def test_cli_replay_prints_a_summary(tmp_path: Path, capsys) -> None:
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=3.0))
    rc = main(
        [
            "replay",
            str(bag),
            "--model",
            "constant-velocity",
            "--out",
            str(tmp_path / "out"),
            "--timing",
            "measured",
            "--rate",
            "5",
            "--no-progress",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "ticks 14" in out and "report" in out
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["rate_hz"] == 5.0


def test_load_planner_choices() -> None:
    config = PlannerConfig()
    assert isinstance(load_planner("constant-velocity", config), ConstantVelocityPlanner)
    with pytest.raises(ReplayInputError, match="no such model folder"):
        load_planner("models/does-not-exist", config)


def test_cli_params_file_sets_the_policy(tmp_path: Path) -> None:
    from blockplan.config import FrameWindowConfig, dump_config

    config = PlannerConfig(frame_window=FrameWindowConfig(stale_camera_policy="fallback"))
    params = tmp_path / "planner.yaml"
    params.write_text(dump_config(config))
    spec = BagSpec(duration_s=4.0, silent_camera="rear", silent_after_s=1.0)
    bag = make_bag(tmp_path / "in.mcap", spec)
    out = tmp_path / "out"
    args = ["replay", str(bag), "--model", "constant-velocity", "--out", str(out)]
    assert main([*args, "--params", str(params), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["fallbacks"] >= 25  # the rear camera is stale from 1.3 s on
    assert metrics["counters"]["degraded_requests"] == 0
