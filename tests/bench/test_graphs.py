"""`blockplan bench --compare-graphs` (bench/graphs.py) and the summary scripts/gpu_bench.sh
writes from it: the JSON keys of the graph path, on the CPU (no capture) and on a GPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from blockplan.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.gpu  # tests/conftest.py skips it without CUDA


def test_bench_compare_graphs_report_and_the_gpu_bench_summary(tmp_path, capsys):
    out = tmp_path / "bench_big.json"
    argv = ["bench", "--random-init", "test", "--compare-graphs", "--no-hf", "--iters", "1"]
    argv += ["--warmup", "0", "--strategies", "scaffold_spec,rollouts", "--rollouts", "2"]
    argv += ["--forward-reps", "1", "--bandwidth-gbs", "20", "--threads", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["graphs"]["capture"] is False and report["graphs"]["runner"] == "DirectRunner"
    assert report["graphs_identical_tokens_fraction"] == {"scaffold_spec": 1.0, "rollouts": 1.0}
    timed = report["graphs"]["forwards_timed_rounds"]
    assert timed["static_forwards"] > 0 and set(timed["eager_forwards"]) == {"wider_than_buckets"}
    widths = report["forward_ms_by_width"]
    assert list(widths["eager"]) == list(widths["graphs"]) and widths["eager"]["1"] > 0
    floor = report["bandwidth_floor"]
    assert floor["decoder_weight_bytes"] > 0 and set(floor["ratio_to_floor"]) == {"eager", "graphs"}
    assert report["scaffold_spec_projection"]["estimate"] is True
    assert set(report["rollouts_latency_ratio_vs_n1"]) == {"eager", "graphs"}
    # scripts/gpu_bench.sh's summary reads exactly these keys
    spec = importlib.util.spec_from_file_location(
        "report", REPO_ROOT / "scripts/gpu_bench_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.main(tmp_path, dry=True)
    assert "Dry run on a CPU" in text and "| `rollouts` |" in text and "bandwidth floor" in text
    capsys.readouterr()
    assert main([*argv[:4], "--forward-reps", "0"]) == 2


@pytest.mark.parametrize("stop_at_round", [1, 2])
def test_bench_compare_graphs_cut_short_keeps_the_finished_rounds(
    tmp_path, monkeypatch, stop_at_round
):
    """A time limit (SIGINT, KeyboardInterrupt) in the plan rounds still writes the JSON: the
    forwards by width ran first, the finished rounds are summarised, and it says so."""
    import blockplan.bench.graphs as graphs

    calls = {"n": 0}
    real = graphs.strategy_runner

    def counting(planner, strategy):
        run = real(planner, strategy)

        def wrapped(obs):
            calls["n"] += 1  # 2 runs a round: scaffold_spec on eager and on graphs
            if calls["n"] > 2 * (stop_at_round - 1):
                raise KeyboardInterrupt
            return run(obs)

        return wrapped

    monkeypatch.setattr(graphs, "strategy_runner", counting)
    out = tmp_path / "bench_big.json"
    argv = ["bench", "--random-init", "test", "--compare-graphs", "--no-hf", "--iters", "3"]
    argv += ["--warmup", "0", "--strategies", "scaffold_spec", "--forward-reps", "1"]
    argv += ["--bandwidth-gbs", "20", "--threads", "1", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and report["timed_rounds"] == stop_at_round - 1
    assert report["forward_ms_by_width"]["graphs"]["1"] > 0
    if stop_at_round == 1:
        assert report["variants"] == {"eager": {}, "graphs": {}}
    else:
        assert report["graphs_identical_tokens_fraction"] == {"scaffold_spec": 1.0}
    spec = importlib.util.spec_from_file_location(
        "report", REPO_ROOT / "scripts/gpu_bench_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "Cut short by its time limit" in module.main(tmp_path, dry=True)


@needs_cuda
def test_gpu_bench_compare_graphs_captures_and_matches(tmp_path):
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "test", "--compare-graphs", "--no-hf", "--iters", "1"]
    argv += ["--strategies", "ar,scaffold_spec,rollouts", "--device", "cuda"]
    argv += ["--dtype", "float64", "--forward-reps", "3", "--bandwidth-gbs", "1000"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    graphs = report["graphs"]
    assert graphs["capture"] is True and graphs["graphs_captured"] > 0
    assert graphs["capture_failures"] == []
    assert set(report["graphs_identical_tokens_fraction"].values()) == {1.0}
