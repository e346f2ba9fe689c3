"""`blockplan export` and `blockplan build-engine` from the command line."""

from __future__ import annotations

import json

import pytest
import torch

from blockplan.cli import main
from tests.optional import importorskip

importorskip("onnx")


def test_export_command_writes_the_folder_and_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "onnx"
    code = main(["export", "--random-init", "test", "--out", str(out), "--windows", "8,256"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    sidecar = json.loads((out / "export.json").read_text())
    assert summary["model_sha256"] == sidecar["model_sha256"]
    assert summary["windows"] == [8, 256]
    assert summary["dynamic"] == {"decoder": "decoder_dynamic.onnx"}
    assert sorted(p.name for p in out.iterdir()) == [
        "decoder_dynamic.onnx",
        "decoder_w256.onnx",
        "decoder_w8.onnx",
        "export.json",
        "vision.onnx",
    ]


def test_export_of_a_model_without_frame_slot_embedding(tmp_path, capsys):
    """`frame_only` models have no frame-slot embedding (the export used to crash on them);
    their vision graph still takes `frame_index`, so every runner feeds the same inputs."""
    import onnx

    out = tmp_path / "onnx"
    args = ["export", "--random-init", "test-stream", "--out", str(out), "--windows", "8,256"]
    assert main(args) == 0
    graph = onnx.load(str(out / "vision.onnx")).graph
    assert [i.name for i in graph.input] == ["image", "camera_index", "frame_index"]


def test_export_command_rejects_bad_windows(tmp_path, capsys):
    assert main(["export", "--random-init", "test", "--out", str(tmp_path), "--windows", "a"]) == 2
    assert "--windows" in capsys.readouterr().err
    out = tmp_path / "narrow"
    assert main(["export", "--random-init", "test", "--out", str(out), "--windows", "2"]) == 2
    assert "the widest must hold a scaffold block" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_build_engine_says_it_needs_a_gpu(tmp_path, capsys):
    assert main(["build-engine", "--onnx", str(tmp_path), "--out", str(tmp_path)]) == 1
    assert "CUDA GPU" in capsys.readouterr().err
