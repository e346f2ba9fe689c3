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


def test_bench_breakdown_explains_the_ratio(tmp_path, capsys):
    argv = ["bench", "--streaming", "--random-init", "test-stream", "--ticks", "2"]
    argv += ["--plans", "0", "--frames", "2", "--image-size", "24x40", "--threads", "1"]
    assert main(argv) == 0
    s = json.loads(capsys.readouterr().out)["streaming"]
    b = s["breakdown"]
    kinds = b["tokens_by_kind"]
    P = b["prompt_tokens"]
    assert s["prompt_tokens"] == P
    assert (
        kinds["header"] + kinds["visual"] + kinds["image_delimiters"] + kinds["text_after_images"]
        == P
    )
    assert kinds["visual"] == 4 * 2 * s["tokens_per_image"]
    # The ego history's digits and the route command depend on the observation.
    assert 0 < kinds["of_which_observation_dependent"] < kinds["text_after_images"]
    streamed = b["streamed_tokens_per_tick"]
    assert streamed["new_visual"] + streamed["text"] == s["prefill_tokens_streamed"]
    assert abs(b["ideal_token_ratio"] - s["prefill_token_ratio"]) < 1e-12
    assert 0 < b["ideal_flop_ratio"] < 1 and 0 < b["ideal_dense_flop_ratio"] < 1
    assert b["ideal_token_ratio_static_text_before_images"] < b["ideal_token_ratio"]
