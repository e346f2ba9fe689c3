"""`blockplan bench --backend torch,onnxruntime`: one interleaved run, ratios and agreement."""

from __future__ import annotations

import json

from blockplan.cli import main
from tests.optional import importorskip

importorskip("onnxruntime")


def test_backend_comparison_report(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--random-init", "test", "--iters", "1", "--warmup", "0", "--threads", "1"]
    argv += ["--backend", "torch,onnxruntime", "--strategies", "ar,rollouts", "--rollouts", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    assert report["reference_backend"] == "torch"
    assert set(report["backends"]) == {"torch", "onnxruntime"}
    assert set(report["latency_ratio_vs_reference"]["onnxruntime"]) == {"ar", "rollouts"}
    assert report["identical_tokens_fraction"]["onnxruntime"] == {"ar": 1.0, "rollouts": 1.0}
    assert report["backends"]["onnxruntime"]["rollouts"]["valid_fraction"] == 1.0


def test_unknown_backend_is_an_error(capsys):
    assert main(["bench", "--random-init", "test", "--backend", "torch,jax"]) == 2
    assert "--backend" in capsys.readouterr().err
