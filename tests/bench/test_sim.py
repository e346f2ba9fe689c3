"""`blockplan bench-sim`: the simulator's speed report, and its argument errors."""

from __future__ import annotations

import json

import pytest

from blockplan.cli import main
from tests.optional import importorskip

importorskip("highway_env")


def test_bench_sim_reports_per_scenario(tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = ["bench-sim", "--seconds", "0.5", "--frames", "2", "--scenario", "merge"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report == json.loads(capsys.readouterr().out)
    assert len(report["cameras"]) == 4 and len(report["image_size"]) == 2
    merge = report["scenarios"]["merge"]
    assert set(report["scenarios"]) == {"merge"} and 1 <= merge["num_frames"] <= 2
    assert merge["sim_steps_per_s"] > 0 and merge["render_cpu_ms_per_camera_median"] > 0


def test_bench_sim_rejects_bad_arguments(capsys):
    assert main(["bench-sim", "--frames", "0"]) == 2
    assert "--frames" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench-sim", "--scenario", "nope"])
