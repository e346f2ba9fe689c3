"""`blockplan bench --bag`: the shipped model plans the consecutive observations the control
loop builds from a recorded bag, each strategy drafting from its own previous answer."""

from __future__ import annotations

import json

import pytest

from blockplan.cli import main
from tests.optional import importorskip

importorskip("highway_env")

MODEL = "models/blockplan-tiny"


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("sequence") / "highway.mcap"
    argv = ["simulate", "--scenario", "highway", "--duration", "2.5", "--seed", "3"]
    assert main([*argv, "--out", str(out)]) == 0
    return out


def _bench(bag, repo_root, tmp_path, name, *extra) -> dict:
    out = tmp_path / f"{name}.json"
    argv = ["bench", "--model", str(repo_root / MODEL), "--bag", str(bag), "--threads", "1"]
    argv += ["--iters", "4", "--warmup", "1", "--no-hf", "--no-compute-floor", *extra]
    assert main([*argv, "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_a_sequence_drafts_from_each_strategys_own_previous_answer(bag, repo_root, tmp_path):
    on = _bench(bag, repo_root, tmp_path, "on", "--strategies", "ar,scaffold_spec")
    assert on["inputs"]["kind"] == "sequence" and not on["inputs"]["independent"]
    assert on["inputs"]["source"] == str(bag) and on["inputs"]["count"] == 5
    # In the round-robin AR answers each input first; spec still drafts from its own last
    # answer (the same tokens as AR's here, spec being exact) and stays exact.
    assert on["scaffold_spec_identical_to_ar_fraction"] == 1.0
    cold = ["--strategies", "scaffold_spec", "--set", "decoding.draft_from_previous=false"]
    off = _bench(bag, repo_root, tmp_path, "off", *cold)
    spec_on = on["strategies"]["scaffold_spec"]["forwards_per_plan"]
    spec_off = off["strategies"]["scaffold_spec"]["forwards_per_plan"]
    assert spec_on < spec_off  # consecutive answers mostly agree: fewer verify windows


def test_a_bag_too_short_for_the_plans_asked_is_a_clear_error(bag, repo_root, capsys):
    argv = ["bench", "--model", str(repo_root / MODEL), "--bag", str(bag), "--iters", "500"]
    assert main([*argv, "--no-hf", "--no-compute-floor"]) == 1
    assert "observations" in capsys.readouterr().err


def test_a_missing_bag_is_a_clear_error(repo_root, tmp_path, capsys):
    argv = ["bench", "--model", str(repo_root / MODEL), "--bag", str(tmp_path / "none.mcap")]
    assert main([*argv, "--no-hf", "--no-compute-floor"]) == 1
    assert "--bag" in capsys.readouterr().err


def test_a_driving_bag_needs_a_vehicle_model(bag, repo_root, capsys):
    argv = ["bench", "--model", str(repo_root / "models/blockplan-robot-tiny"), "--bag", str(bag)]
    assert main([*argv, "--no-compute-floor"]) == 1
    assert "vehicle model" in capsys.readouterr().err
