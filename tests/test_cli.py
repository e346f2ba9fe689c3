import json
import subprocess
import sys

from blockplan import __version__
from blockplan.cli import COMMAND_HELP, COMMANDS, _command_parser, main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert __version__ in capsys.readouterr().out


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_each_command_has_help():
    for name in COMMANDS:
        parser, module = _command_parser(name)
        assert f"blockplan {name}" in parser.format_help()
        assert parser.description == COMMAND_HELP[name]
        assert callable(module.run)
        assert not hasattr(module, "HELP"), f"{name}: the one-line help lives in COMMAND_HELP"


def test_module_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "blockplan.cli", "config", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "blockplan config" in proc.stdout


def test_config_command_json(capsys):
    assert main(["-q", "config", "--json"]) == 0
    params = json.loads(capsys.readouterr().out)
    assert params["decoding"]["strategy"] == "scaffold_spec"


def test_config_command_reports_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("n: {ros__parameters: {decoding: {strategy: beam}}}\n")
    assert main(["config", "--params", str(bad)]) == 1
    assert "decoding.strategy='beam'" in capsys.readouterr().err
