"""`blockplan demo` end to end: simulate, replay, report (needs highway-env)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from blockplan.cli import main
from tests.optional import importorskip

importorskip("highway_env")


@pytest.mark.slow
def test_demo_with_the_baseline(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--model", "constant-velocity", "--duration", "2"]
    assert main(args) == 0
    assert "report" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ticks"] >= 18 and metrics["evaluated_plans"] == metrics["plans"] > 0
    with (out / "plans.mcap").open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        paths = list(reader.iter_decoded_messages(topics=["/planning/trajectory"]))
    assert len(paths) == metrics["ticks"]
    assert (out / "report.html").stat().st_size > 10_000
    assert main(args) == 0  # a second run replaces the previous demo
    (out / "notes.txt").write_text("mine")
    assert main(args) == 1  # but never touches a folder holding other files
