"""One error path for every command: a user's mistake is one `error: ...` line and exit
status 1, never a traceback; Ctrl-C is one line and 130."""

from __future__ import annotations

import argparse
import errno
import json
import re
import shutil
from pathlib import Path

import pytest

from blockplan.cli import main, run_command
from blockplan.config import ConfigError, PlannerConfig


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    import torch

    from blockplan.planner.planner import Planner

    torch.set_num_threads(1)
    planner = Planner.random_init("test", PlannerConfig())
    folder = tmp_path_factory.mktemp("model") / "m"
    planner.model.save_pretrained(folder, tokenizer_json=planner.tokenizer.to_str())
    return folder


def _damaged(model_folder: Path, tmp_path: Path, how: str) -> Path:
    folder = tmp_path / how
    shutil.copytree(model_folder, folder)
    if how == "flipped_byte":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[-100] ^= 1
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif how == "no_tokenizer":
        (folder / "tokenizer.json").unlink()
    elif how == "garbage_config":
        (folder / "config.json").write_text("{garbage")
    elif how == "garbage_config_unverified":
        (folder / "config.json").write_text("{garbage")
        (folder / "manifest.json").unlink()
    elif how == "truncated_unverified":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
        (folder / "manifest.json").unlink()
    elif how == "no_folder":
        shutil.rmtree(folder)
    return folder


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "how,match",
    [
        ("flipped_byte", r"model\.safetensors: sha256"),
        ("no_tokenizer", r"lists 'tokenizer\.json', which is missing"),
        ("garbage_config", r"config\.json: sha256"),
        ("garbage_config_unverified", r"cannot read .*config\.json"),
        ("truncated_unverified", r"model\.safetensors: cannot load the weights"),
        ("no_folder", "no such model folder"),
    ],
)
def test_bench_model_errors_are_one_line(model_folder, tmp_path, capsys, how, match) -> None:
    folder = _damaged(model_folder, tmp_path, how)
    args = ["bench", "--model", str(folder), "--iters", "1", "--warmup", "0", "--no-hf"]
    assert main(args) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert re.search(match, line), line


def test_bench_reports_unverified_weights(model_folder, tmp_path, capsys) -> None:
    import json

    folder = _damaged(model_folder, tmp_path, "unverified")
    (folder / "manifest.json").unlink()
    for source, weights in ((folder, "unverified"), (model_folder, "sha256-verified")):
        args = ["bench", "--model", str(source), "--strategies", "ar", "--iters", "1"]
        assert main([*args, "--warmup", "0", "--no-hf"]) == 0
        assert json.loads(capsys.readouterr().out)["model"]["weights"] == weights


class _Raises:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self, args: argparse.Namespace) -> int:
        raise self.error


@pytest.mark.parametrize(
    "error,status,text",
    [
        (ConfigError("control.rate_hz=0: must be > 0"), 1, "error: control.rate_hz=0"),
        (OSError(errno.ENOSPC, "No space left on device", "/x/m.json"), 1, "/x/m.json: No space"),
        (OSError(errno.EROFS, "Read-only file system", "/ro"), 1, "error: /ro: Read-only"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_every_command_shares_the_error_path(capsys, error, status, text) -> None:
    assert run_command(_Raises(error), argparse.Namespace()) == status
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(ZeroDivisionError):
        run_command(_Raises(ZeroDivisionError()), argparse.Namespace())


# ---------------------------------------------------------------- report files (--json)


def test_a_report_path_is_refused_before_the_command_runs(tmp_path, capsys) -> None:
    """`--json PATH` that could not take the file fails before the work, not after it."""
    blocker = tmp_path / "a.log"
    blocker.write_text("x")
    ran = _Raises(AssertionError("the command ran before its --json path was checked"))
    cases = {
        str(tmp_path): "is a folder",
        str(blocker / "m.json"): f"cannot create it: {blocker} is a file",
        str(blocker / "deeper" / "m.json"): f"cannot create it: {blocker} is a file",
    }
    for path, text in cases.items():
        assert run_command(ran, argparse.Namespace(json=path)) == 1
        err = capsys.readouterr().err
        assert f"error: --json {path}" in err and text in err and "Traceback" not in err


def test_a_report_path_under_new_folders_is_fine_and_made_only_when_written(tmp_path) -> None:
    from blockplan.commands.outputs import check_output_file, write_json_file

    path = tmp_path / "new" / "deeper" / "m.json"
    assert check_output_file(path) == path and not (tmp_path / "new").exists()
    write_json_file(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert check_output_file(path) == path  # an existing report is overwritten


def test_a_switch_named_json_is_not_a_path(capsys) -> None:
    class Runs:
        def run(self, args: argparse.Namespace) -> int:
            return 0

    assert run_command(Runs(), argparse.Namespace(json=True)) == 0  # config/schema --json


def test_eval_refuses_zero_samples_before_loading_anything(tmp_path, capsys) -> None:
    args = ["eval", "--data", str(tmp_path / "none"), "--model", "models/blockplan-tiny"]
    for flag in ("--max-samples", "--mlp-seeds"):
        assert main([*args, "--json", str(tmp_path / "o.json"), flag, "0"]) == 2
        assert f"{flag}=0 must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_an_unknown_preset_lists_every_preset(capsys) -> None:
    assert main(["bench", "--random-init", "huge", "--iters", "1", "--no-hf"]) == 1
    err = capsys.readouterr().err
    assert "preset 'huge'" in err and "robot-tiny" in err and "qwen2.5-vl-3b" in err
