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
    bad.write_text("blockplan_planner: {ros__parameters: {decoding: {strategy: beam}}}\n")
    assert main(["config", "--params", str(bad)]) == 1
    assert "decoding.strategy='beam'" in capsys.readouterr().err


def test_play_parses_silence_and_names_what_is_missing_without_ros(capsys, tmp_path):
    import argparse
    import importlib.util

    from blockplan.commands.play import _silence

    assert _silence("/camera/rear/image_raw@2.5") == ("/camera/rear/image_raw", 2.5)
    for bad in ("/odom", "@3", "/odom@soon"):
        try:
            _silence(bad)
        except argparse.ArgumentTypeError as e:
            assert "TOPIC@SECONDS" in str(e)
        else:
            raise AssertionError(bad)
    assert main(["play", str(tmp_path / "none.mcap")]) == 1  # the bag first, ROS or not
    assert "none.mcap: no such bag" in capsys.readouterr().err
    if importlib.util.find_spec("rclpy") is None:
        bag = tmp_path / "some.mcap"
        bag.write_bytes(b"")
        assert main(["play", str(bag)]) == 1
        assert "needs ROS 2 (rclpy)" in capsys.readouterr().err
