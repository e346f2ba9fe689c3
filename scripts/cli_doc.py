"""docs/CLI.md from the command line's own parsers: every command of `blockplan.cli.COMMANDS`,
in `--help`'s order, with its one-line help, usage and a table of its arguments.

    python scripts/cli_doc.py            # rewrite docs/CLI.md (`make cli-doc`)
    python scripts/cli_doc.py --check    # exit 1 if docs/CLI.md is not what this writes

The text comes from the parsers' actions, not from argparse's help formatter, so it does not
depend on the terminal's width or the Python version. tests/test_cli_doc.py fails when
docs/CLI.md is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockplan.cli import COMMAND_HELP, COMMANDS, _command_parser, build_parser

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "CLI.md"

HEADER = """# Command reference

Generated from the argparse parsers by `make cli-doc` (`python scripts/cli_doc.py`); edit
the parsers, not this file. `blockplan COMMAND --help` prints the same. Every command reports
a mistake in its inputs as one line, `error: ...`, and exits with status 1; usage mistakes
exit with 2; Ctrl-C exits with 130.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's own expansion: %(default)s, %(choices)s, %(prog)s ...
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        if params.get("choices") is not None:
            params["choices"] = ", ".join(map(str, params["choices"]))
        text = text % dict(params, prog=prog)
    return _cell(text)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    elif isinstance(action.metavar, tuple):
        value = " ".join(action.metavar)
    else:
        value = action.metavar or (
            action.dest if not action.option_strings else action.dest.upper()
        )
    if action.nargs in ("*", "+"):
        return f"{value} ..." if action.nargs == "+" else f"[{value} ...]"
    if action.nargs == "?":
        return f"[{value}]"
    if isinstance(action.nargs, int) and action.nargs > 1:
        return " ".join([value] * action.nargs)
    return value


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default is None or default is argparse.SUPPRESS:
        return ""
    if isinstance(default, (list, tuple)):
        default = " ".join(map(str, default))
    return f"`{_cell(default)}`" if str(default) != "" else '`""`'


def command_section(name: str) -> list[str]:
    parser, _ = _command_parser(name)
    lines = [f"## `blockplan {name}`", "", _cell(COMMAND_HELP[name]) + ".", ""]
    lines += _parser_lines(parser)
    for action in parser._actions:  # a command with actions (`recipe run`): one part each
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for sub, subparser in action.choices.items():
                lines += [
                    f"### `blockplan {name} {sub}`",
                    "",
                    _cell(helps.get(sub) or "") + ".",
                    "",
                ]
                lines += _parser_lines(subparser)
    return lines


def _parser_lines(parser: argparse.ArgumentParser) -> list[str]:
    usage = " ".join(parser.format_usage().split())  # one line: no dependence on the width
    lines = ["```text", usage.removeprefix("usage: "), "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:  # a setting behind --set: its own table
            continue
        names = ", ".join(action.option_strings)
        value = _value(action)
        if not names:  # a positional argument: its name is its value
            argument = f"`{action.metavar or action.dest}`"
        else:
            argument = f"`{names} {value}`" if value else f"`{names}`"
        rows.append(f"| {_cell(argument)} | {_default(action)} | {_help(action, parser.prog)} |")
    if rows:
        lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    settings = getattr(parser, "blockplan_settings", None)
    if settings:
        lines += ["Settings (`--set NAME=VALUE`):", "", "| setting | meaning [default] |"]
        lines += ["|---|---|"] + [f"| `{k}` | {_cell(v)} |" for k, v in sorted(settings.items())]
        lines.append("")
    return lines


def render() -> str:
    top = build_parser()
    lines = [HEADER, "## `blockplan`", "", _cell(top.description), ""]
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`{n}`](#blockplan-{n}) | {_cell(COMMAND_HELP[n])} |" for n in COMMANDS]
    lines += [
        "",
        "Global options, before the command: `--version`, `-v` / `--verbose` (debug log and",
        "tracebacks), `-q` / `--quiet` (warnings and errors only).",
        "",
    ]
    for name in COMMANDS:
        lines += command_section(name)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=OUT, help="the file to write")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text(encoding="utf-8") != text:
            print(f"{args.out} is stale: run `make cli-doc`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(COMMANDS)} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
