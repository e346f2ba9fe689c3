"""torchrun with 2 CPU processes (gloo): both ranks end with identical parameters."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_two_process_ddp_keeps_ranks_identical(dataset_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",
        "-m",
        "blockplan.cli",
        "-q",
        "train",
        "--data",
        str(dataset_dir),
        "--out",
        str(out),
        "--arch",
        "test",
        "--cameras",
        "front",
        "rear",
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--save-every",
        "3",
        "--val-samples",
        "2",
        "--num-threads",
        "1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    done = records[-1]
    assert done["event"] == "done" and done["world_size"] == 2 and done["step"] == 3
    assert len(done["param_digests"]) == 2
    assert done["param_digests"][0] == done["param_digests"][1]
    assert (out / "best" / "model.safetensors").is_file()
