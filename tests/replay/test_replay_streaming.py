"""Replay reports the streaming window: shared frames, spacing error, the planner's reuse."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.replay import run_replay
from blockplan.runtime import ConstantVelocityPlanner
from tests.replay.bagmaker import BagSpec, make_bag


def test_streaming_replay_reuses_frames_with_a_tolerance(tmp_path: Path, capsys) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=3.0))
        out = tmp_path / "out"
        args = ["replay", str(bag), "--model", "random-init:test-stream", "--out", str(out)]
        args += ["--timing", "ideal", "--rate", "2.5", "--no-progress"]
        args += ["--set", "frame_window.reuse_tolerance=0.4", "--set", "model.num_threads=1"]
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)
    assert "frames shared with earlier requests" in capsys.readouterr().out
    s = json.loads((out / "metrics.json").read_text())["streaming"]
    prefill = s["planner"]["prefill"]
    assert s["planner"]["mode"] == "auto"
    # The warm-up is not counted: the first request is a full prefill after the reset.
    assert prefill["full_prefill_reasons"] == {"reset": 1}
    assert prefill["ticks"] == prefill["streamed_ticks"] + 1 >= 5
    assert prefill["frames_reused"] > 0 and s["window_frames_shared"] > 0
    assert s["frame_spacing_error_ms"]["p50"] <= 200.0
    assert s["encode_prefill_ms"]["p50"] > 0


def test_baseline_replay_counts_windows_without_planner_stats(tmp_path: Path) -> None:
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=3.0))
    outputs = run_replay(bag, tmp_path / "out", ConstantVelocityPlanner(), PlannerConfig())
    s = outputs.metrics["streaming"]
    assert s["planner"] is None and s["encode_prefill_ms"]["p50"] is None
    requests = outputs.metrics["counters"]["requests"]
    assert s["window_frames_new"] + s["window_frames_shared"] == 4 * 2 * requests  # K x T
    # Nearest frames at 10 Hz; only start-up windows (not yet padded) are farther off.
    assert s["frame_spacing_error_ms"]["p50"] <= 50.0
    assert s["frame_spacing_error_ms"]["max"] <= 250.0


def test_set_overrides_are_validated(tmp_path: Path, capsys) -> None:
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=1.0))
    base = ["replay", str(bag), "--model", "constant-velocity", "--out", str(tmp_path / "o")]
    assert main([*base, "--set", "frame_window.reuse_tolerance=0.6"]) == 1
    assert "frame_window.reuse_tolerance=0.6" in capsys.readouterr().err
    assert main([*base, "--set", "frame_window.nope=1"]) == 1
    assert "frame_window.nope" in capsys.readouterr().err
    assert main([*base, "--set", "streaming"]) == 1
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main([*base, "--set", "frame_window.streaming=off", "--set", "a=1"]) == 1
    assert "unknown parameter 'a'" in capsys.readouterr().err  # "off" itself was fine


def test_streaming_recovers_after_a_burst_of_nan_odometry(tmp_path: Path) -> None:
    """A second of NaN odometry pauses the requests; afterwards the frame window still
    prefers frames earlier requests used, and the streaming prefill must go back to
    incremental (it used to stay in full prefills, 'disjoint', for the rest of the bag)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from blockplan.config import default_params_path, load_config
        from blockplan.replay import load_planner

        config = load_config(default_params_path(), overrides=["model.num_threads=1"])
        planner = load_planner("random-init:test-stream", config)
        spec = BagSpec(duration_s=5.0, nan_odometry_at=set(range(15, 25)))
        bag = make_bag(tmp_path / "in.mcap", spec)
        outputs = run_replay(bag, tmp_path / "out", planner, config, "ideal")
    finally:
        torch.set_num_threads(threads)
    m = outputs.metrics
    assert m["counters"]["odometry_nonfinite"] == 10
    prefill = m["streaming"]["planner"]["prefill"]
    assert prefill["ticks"] >= 30
    assert prefill["full_prefills"] <= 3, prefill  # the start, the pause (and one more)
    assert prefill["streamed_ticks"] >= prefill["ticks"] - 3
    # What the planner reused is what the runtime's windows shared.
    assert prefill["frames_reused"] == m["streaming"]["window_frames_shared"]
