"""`blockplan train --help` lists what a user sets for a run; the rest are settings behind
`--set NAME=VALUE`, converted and checked as the option itself would be."""

from __future__ import annotations

import argparse

import pytest

from blockplan.cli import _command_parser

BASE = ["--data", "D", "--out", "O", "--steps", "3"]


def _parser():
    parser, _ = _command_parser("train")
    return parser


def test_help_lists_at_most_25_options():
    listed = [a for a in _parser()._actions if a.help != argparse.SUPPRESS]
    assert len(listed) <= 25
    assert {"--set", "--settings", "--data", "--steps", "--init-from"} <= {
        s for a in listed for s in a.option_strings
    }


def test_a_setting_is_the_same_as_its_old_flag():
    old = _parser().parse_args(
        [*BASE, "--ego-tokens", "4", "--ego-lead", "--cameras", "front", "rear"]
    )
    new = _parser().parse_args(
        [*BASE, "--set", "ego-tokens=4", "--set", "ego-lead=true", "--set", "cameras=[front, rear]"]
    )
    assert vars(old) == vars(new)
    off = _parser().parse_args([*BASE, "--set", "ego-lead=false"])
    assert off.ego_lead is False


@pytest.mark.parametrize(
    "setting, message",
    [
        ("egotokens=4", "'egotokens' is not a setting"),
        ("steps=4", "'steps' is not a setting"),  # a user option is not a setting
        ("ego-lead=maybe", "a switch: write true or false"),
        ("ego-tokens=four", "invalid int value: 'four'"),
        ("ego-tokens", "write NAME=VALUE"),
    ],
)
def test_a_bad_setting_is_a_usage_error_naming_it(setting, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args([*BASE, "--set", setting])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_settings_lists_every_setting(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--settings"])
    out = capsys.readouterr().out
    assert "ego-lead" in out and "tower-steps" in out and "steps " not in out.split()
