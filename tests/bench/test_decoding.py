"""`blockplan bench` writes the report the issue fixes, on a tiny random model."""

from __future__ import annotations

import json

import pytest

from blockplan.cli import main
from tests.optional import importorskip

STRATEGY_KEYS = {
    "forwards_per_plan",
    "tokens_per_plan",
    "latency_ms",
    "tokens_per_s",
    "valid_fraction",
}
PER_STRATEGY = {"editable_tokens_per_forward"}  # not for the hf_generate baseline


@pytest.mark.slow
def test_bench_report_keys(tmp_path, capsys):
    importorskip("transformers")
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "test", "--iters", "1", "--warmup", "0", "--rollouts", "2"]
    argv += ["--strategies", "ar,scaffold_spec,section_diffusion,rollouts", "--threads", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    assert report["model"]["params"] > 0 and report["model"]["source"] == "random-init test"
    assert set(report["strategies"]) == {"ar", "scaffold_spec", "section_diffusion", "rollouts"}
    floor_keys = {"flops_per_plan", "compute_floor_ms", "compute_floor_ratio"}
    for entry in report["strategies"].values():
        assert set(entry) == STRATEGY_KEYS | floor_keys | PER_STRATEGY
        assert set(entry["latency_ms"]) == {"p50", "p90", "p99"}
        assert entry["flops_per_plan"] > 0 and entry["compute_floor_ratio"] > 0
    assert set(report["hf_generate"]) == STRATEGY_KEYS
    assert report["gemm"]["best_gflops_per_s"] >= report["gemm"]["median_gflops_per_s"] > 0
    assert report["scaffold_spec_speedup_vs_hf_generate"] > 0
    for name in ("ar", "scaffold_spec", "section_diffusion", "rollouts"):
        assert report["strategies"][name]["valid_fraction"] == 1.0
    assert report["scaffold_spec_identical_to_ar_fraction"] == 1.0
    assert report["scaffold_spec_tokens_per_step"] >= 1.0
    assert report["rollouts"]["n"] == 2 and report["rollouts"]["latency_ratio_vs_n1"] > 0


def test_bench_rejects_unknown_strategy(capsys):
    assert main(["bench", "--random-init", "test", "--strategies", "beam"]) == 2
    assert "beam" in capsys.readouterr().err


@pytest.mark.slow
def test_robot_bench_report_keys(tmp_path):
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "robot-test", "--iters", "1", "--warmup", "0"]
    assert main([*argv, "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    names = {"ar", "full_diffusion", "section_diffusion", "pipelined"}  # the robot default
    assert set(report["strategies"]) == names
    floor_keys = {"flops_per_plan", "compute_floor_ms", "compute_floor_ratio"}
    for entry in report["strategies"].values():
        assert set(entry) == STRATEGY_KEYS | floor_keys | PER_STRATEGY
        assert entry["valid_fraction"] == 1.0 and entry["flops_per_plan"] > 0
    assert "hf_generate" not in report
    assert report["pipelined_speedup_vs_full_diffusion"] > 0
    assert report["pipelined_speedup_vs_section_diffusion"] > 0
    assert report["pipelined_mean_active_blocks"] >= 1.0
    assert report["model"]["answer_tokens"] == 77 and report["model"]["block_size"] == 7


def test_robot_bench_runs_pipelined_against_full_diffusion(tmp_path, capsys):
    argv = ["bench", "--random-init", "robot-test", "--iters", "1", "--warmup", "0"]
    argv += ["--strategies", "full_diffusion,pipelined", "--no-compute-floor", "--threads", "1"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["strategies"]) == {"full_diffusion", "pipelined"}
    assert report["pipelined_speedup_vs_full_diffusion"] > 0
    assert "pipelined_speedup_vs_section_diffusion" not in report
    assert report["strategies"]["pipelined"]["forwards_per_plan"] < 57


@pytest.mark.slow
def test_train_drafter_then_bench_dflash_against_ar(tmp_path, capsys):
    """The drafter folder `train-drafter` writes runs `dflash` in the bench: AR's tokens,
    the drafter's forwards counted apart from the target's."""
    drafter = tmp_path / "drafter"
    argv = ["train-drafter", "--random-init", "test", "--synthetic", "4", "--steps", "20"]
    argv += ["--batch-size", "8", "--hidden-size", "32", "--intermediate-size", "64"]
    assert main([*argv, "--out", str(drafter), "--threads", "1"]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["answers"] == 4 and trained["steps"] == 20
    assert (drafter / "manifest.json").is_file()
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "test", "--iters", "2", "--warmup", "0", "--no-hf"]
    argv += ["--backend", "torch", "--drafter", str(drafter), "--no-compute-floor"]
    assert main([*argv, "--threads", "1", "--json", str(out)]) == 0  # default: every strategy
    report = json.loads(out.read_text())
    assert "dflash" in report["strategies"]
    entry = report["strategies"]["dflash"]
    assert entry["valid_fraction"] == 1.0 and entry["draft_forwards_per_plan"] > 0
    assert report["dflash"]["identical_to_ar_fraction"] == 1.0
    assert report["dflash"]["scaffold_spec_forwards_over_dflash"] > 0
