"""`blockplan bench --streaming` writes the report the issue fixes, on a tiny random model."""

from __future__ import annotations

import json

from blockplan.cli import main


def test_bench_streaming_report(tmp_path, capsys):
    out = tmp_path / "streaming.json"
    argv = ["bench", "--streaming", "--random-init", "test-stream", "--ticks", "3"]
    argv += ["--plans", "0", "--frames", "2", "--image-size", "24x40", "--threads", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    s = report["streaming"]
    assert s["ticks"] == 3 and s["frames"] == 2 and s["exact"] is True
    assert s["prefill_cost_ratio"] > 0 and s["max_abs_logit_diff"] <= 1e-4
    assert s["prefill"]["streamed_ticks"] == 2 and s["ade_diff_m"] is None
    assert s["model"] == "random-init test-stream"


def test_bench_streaming_grid_and_bad_arguments(tmp_path, capsys):
    argv = ["bench", "--streaming", "--random-init", "test", "--ticks", "2", "--plans", "0"]
    argv += ["--frames", "2", "--grid", "3x2", "--image-size", "24x40", "--threads", "1"]
    assert main(argv) == 0
    s = json.loads(capsys.readouterr().out)["streaming"]
    assert s["tokens_per_image"] == 6 and s["exact"] is False
    assert main(["bench", "--streaming", "--random-init", "test", "--ticks", "1"]) == 2
    assert main(["bench", "--streaming", "--random-init", "test", "--image-size", "big"]) == 2
    assert main(["bench", "--streaming", "--random-init", "test", "--grid", "x"]) == 1
    assert main(["bench", "--streaming", "--random-init", "nope-stream", "--ticks", "2"]) == 1


def test_bench_streaming_needs_the_torch_backend(capsys):
    argv = ["bench", "--streaming", "--random-init", "test", "--backend", "onnxruntime"]
    assert main(argv) == 2
    assert "torch backend" in capsys.readouterr().err
