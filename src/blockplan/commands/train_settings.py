"""A command's settings: the options a user rarely sets leave `--help` and are given as
`--set NAME=VALUE` (converted and checked as the option itself would be), listed by
`--settings`. Their old spelling `--NAME` is still read."""

from __future__ import annotations

import argparse


class SetAction(argparse.Action):
    """`--set NAME=VALUE`: one setting, converted and checked as its own option would be
    (`--set ego-lead=true`, `--set cameras=front,rear`)."""

    def __call__(self, parser, namespace, value, option_string=None):
        name, sep, text = str(value).partition("=")
        action = parser._option_string_actions.get(f"--{name.strip()}")
        user = parser.blockplan_user_options  # type: ignore[attr-defined]
        if not sep or action is None or action.dest in user:
            known = ", ".join(sorted(parser.blockplan_settings))  # type: ignore[attr-defined]
            why = "write NAME=VALUE" if not sep else f"{name!r} is not a setting"
            raise argparse.ArgumentError(self, f"{why} (settings: {known})")
        text = text.strip()
        if isinstance(action, argparse._StoreTrueAction):
            if text.lower() not in ("true", "false"):
                raise argparse.ArgumentError(self, f"{name}: a switch: write true or false")
            setattr(namespace, action.dest, text.lower() == "true")
            return
        if action.nargs:  # a list: `a,b`, `a b` or YAML's `[a, b]`
            parts = text.removeprefix("[").removesuffix("]").replace(",", " ").split()
        else:
            parts = [text]
        action(parser, namespace, parser._get_values(action, parts), f"--{name}")


class ListSettings(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        for name, text in sorted(parser.blockplan_settings.items()):  # type: ignore[attr-defined]
            print(f"  {name:<24} {text}")
        parser.exit()


def settings_behind_set(parser: argparse.ArgumentParser, user_options: tuple[str, ...]) -> None:
    """Every option outside `user_options` leaves `--help` for `--set NAME=VALUE` (its old
    spelling `--NAME` is still read, so older command lines keep working)."""
    parser.blockplan_user_options = user_options  # type: ignore[attr-defined]
    settings = {}
    for action in parser._actions:
        if action.dest in user_options or not action.option_strings:
            continue
        name = action.option_strings[0][2:]
        default = "" if action.default in (None, False, []) else f" [{action.default}]"
        settings[name] = " ".join(str(action.help or "").split()) + default
        action.help = argparse.SUPPRESS
    parser.blockplan_settings = settings  # type: ignore[attr-defined]
    parser.add_argument(
        "--set",
        action=SetAction,
        metavar="NAME=VALUE",
        help="a model or training setting, e.g. --set ego-lead=true --set lead-weight=1 "
        "(repeatable; `--settings` lists them)",
    )
    parser.add_argument("--settings", action=ListSettings, help="list the settings and exit")
