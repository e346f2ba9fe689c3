"""scripts/: every file is listed in scripts/README.md, and the Python tools a user runs on a
data set or a model folder do what their usage line says."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np

from tests.train.conftest import write_dataset

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_lists_every_script_and_only_those():
    listed = set(re.findall(r"^\| `([\w.]+)` \|", (SCRIPTS / "README.md").read_text(), re.M))
    present = {p.name for p in SCRIPTS.iterdir() if p.is_file() and p.name != "README.md"}
    assert listed == present


def test_every_script_says_how_to_run_it():
    for path in SCRIPTS.iterdir():
        if path.suffix in (".py", ".sh"):
            usage = f"scripts/{path.name}" in path.read_text()  # its usage line
            assert usage or path.name == "system_deps.sh", path  # (the Makefile runs that one)


def test_gate_pass_rates_passes_a_straight_constant_speed_expert(tmp_path, monkeypatch):
    data = write_dataset(tmp_path / "data", {"train": [0], "test": [1, 2]})
    for shard in (data / "test").glob("*.npz"):  # the labels' future speed, as recorded
        arrays = dict(np.load(shard))
        arrays["future_speed"] = np.full(arrays["future_xy"].shape[:2], 10.0)
        np.savez_compressed(shard, **arrays)
    out = tmp_path / "rates.json"
    monkeypatch.setattr(sys, "argv", ["gate_pass_rates.py", str(data), "--json", str(out)])
    _load("gate_pass_rates").main()
    doc = json.loads(out.read_text())
    rates = {k: v for k, v in doc.items() if isinstance(v, dict)}
    assert set(rates) == {"highway"}
    assert rates["highway"]["samples"] > 0
    assert rates["highway"]["after_hard_gates"] == 1.0
    assert rates["highway"]["left_out_reversing"] == 0


def test_expert_failures_names_a_cause_from_the_two_cars():
    """`cause` from the vehicles at a collision; a clean highway second has no failure."""
    from types import SimpleNamespace as V

    from tests.optional import importorskip

    importorskip("highway_env")
    tool = _load("expert_failures")
    ring = V(speed=12.0, heading=0.0, lane_index=("se", "ex", 0))
    entering = V(speed=6.0, heading=1.2, lane_index=("ses", "se", 0))
    beside = V(speed=14.0, heading=0.2, lane_index=("se", "ex", 1))
    crossing = V(speed=5.0, heading=1.6, lane_index=("ir1", "il3", 0))
    turning = V(speed=3.0, heading=0.0, lane_index=("ir0", "il1", 0))
    backwards = V(speed=-0.8, heading=0.0, lane_index=("il1", "o1", 0))
    assert tool.cause(entering, ring) == "entry without yielding"
    assert tool.cause(ring, beside) == "lane change"
    assert tool.cause(turning, crossing) == "junction crossing"
    assert tool.cause(backwards, ring) == "moving backwards"
    assert tool.failure("highway", 0, 1.0) is None


def test_train_speed_times_both_attentions(monkeypatch, capsys):
    monkeypatch.setattr(
        sys, "argv", ["train_speed.py", "--arch", "test", "--batch-size", "1", "--steps", "1"]
    )
    _load("train_speed").main()
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["step_ms"]) == {"tiled", "dense"} and doc["speedup"] > 0
    assert doc["tiles"] > 1 and 0 < doc["scores_computed"] < 1
