"""The kinds of recipe stage: what each runs, where its output lies, how it is verified.

Most kinds are a `blockplan` command run in a child process with the recipe's arguments plus
the output option the runner owns (`--out` or `--json` inside the stage's folder). `average`
and `select` are the recipe's own operations: the uniform average of model folders' weights,
and the choice of one candidate model by closed loop on validation seeds (recipes/select.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from blockplan.recipes.errors import RecipeError

METRICS = "metrics.json"


def _json_ok(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def _model_ok(folder: Path) -> bool:
    from blockplan.model.weights import WeightsError, verify_manifest

    try:
        return folder.is_dir() and verify_manifest(folder)
    except WeightsError:
        return False


@dataclass(frozen=True)
class Kind:
    name: str
    command: str | None  # the blockplan command it runs; None: a recipe operation
    output: Callable[[Path], Path]  # the main output, from the stage's folder
    owned: Callable[[Path], dict]  # options the runner sets (the user may not)
    verify: Callable[[Path], bool]  # does the output exist and check out
    resumable: bool = False  # the command continues a partial run in its folder itself
    makes_model: bool = False

    def parser(self) -> argparse.ArgumentParser:
        if self.command is None:
            parser = OPERATIONS[self.name][0]()
        else:
            from blockplan.cli import _command_parser

            parser, _ = _command_parser(self.command)
        return parser

    def parse(self, argv: list[str], where: str) -> argparse.Namespace:
        """Parse `argv` (plus the runner's own options) as the command would, raising
        RecipeError naming `where` instead of exiting."""
        parser = self.parser()
        full = list(argv)
        for key, value in self.owned(Path("STAGE_DIR")).items():
            if f"--{key}" in argv:
                raise RecipeError(f"{where}.args.{key}: set by the recipe runner, leave it out")
            full += [f"--{key}"] if value is True else [f"--{key}", str(value)]

        def error(message: str):
            raise RecipeError(f"{where}: {parser.prog}: {message}")

        parser.error = error  # type: ignore[method-assign]
        for group in parser._subparsers._group_actions if parser._subparsers else ():
            group.error = error  # pragma: no cover - no command has nested subcommands
        return parser.parse_args(full)

    def argv(self, args: list[str], folder: Path) -> list[str]:
        """The full command line of this kind for a stage whose folder is `folder`."""
        full = list(args)
        for key, value in self.owned(folder).items():
            full += [f"--{key}"] if value is True else [f"--{key}", str(value)]
        return full


def _average_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipe average")
    parser.add_argument("--models", nargs="+", required=True, help="model folders to average")
    parser.add_argument("--out", required=True, help="the averaged model folder")
    return parser


def _average(args: argparse.Namespace) -> None:
    from blockplan.recipes.average import average_folders

    average_folders([Path(m) for m in args.models], Path(args.out))


def _select_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipe select")
    parser.add_argument("--models", nargs="+", required=True, help="candidate model folders")
    parser.add_argument(
        "--scenario", nargs="+", required=True, help="the scenarios each candidate drives"
    )
    parser.add_argument("--episodes", type=int, required=True, help="episodes per scenario")
    parser.add_argument("--seed", type=int, required=True, help="the first validation seed")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per episode")
    parser.add_argument("--out", required=True, help="the stage folder")
    return parser


def _select(args: argparse.Namespace) -> None:
    from blockplan.recipes.select import select_model

    select_model(
        args.models, args.scenario, args.episodes, args.seed, args.duration, Path(args.out)
    )


def _selection_ok(folder: Path) -> bool:
    from blockplan.recipes.select import SELECTION

    return _json_ok(folder / SELECTION) and _model_ok(folder / "model")


OPERATIONS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable]] = {
    "average": (_average_parser, _average),
    "select": (_select_parser, _select),
}


def _out(folder: Path) -> dict:
    return {"out": folder}


def _metrics(folder: Path) -> dict:
    return {"json": folder / METRICS}


def _metrics_file(folder: Path) -> Path:
    return folder / METRICS


def _metrics_ok(folder: Path) -> bool:
    return _json_ok(folder / METRICS)


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "dataset",
            "dataset",
            output=lambda d: d,
            owned=_out,
            verify=lambda d: _json_ok(d / "manifest.json"),
            resumable=True,
        ),
        Kind(
            "robot-demos",
            "robot-demos",
            output=lambda d: d / "dataset",
            owned=_out,
            verify=lambda d: _json_ok(d / "dataset" / "manifest.json"),
            resumable=True,  # a bag that exists is kept (sim/robot_demos.py)
        ),
        Kind(
            "robot-scenes",
            "robot-scenes",
            output=lambda d: d,
            owned=_out,
            verify=lambda d: _json_ok(d / "manifest.json"),
            resumable=True,  # a shard that exists is kept (sim/scene_frames.py)
        ),
        Kind(
            "simulate",
            "simulate",
            output=lambda d: d / "bag",
            owned=lambda d: {"out": d / "bag"},
            verify=lambda d: (d / "bag").exists(),
        ),
        Kind(
            "train",
            "train",
            output=lambda d: d / "best",
            owned=lambda d: {"out": d, "resume": True},
            verify=lambda d: _model_ok(d / "best"),
            resumable=True,
            makes_model=True,
        ),
        Kind(
            "average",
            None,
            output=lambda d: d / "model",
            owned=lambda d: {"out": d / "model"},
            verify=lambda d: _model_ok(d / "model"),
            makes_model=True,
        ),
        Kind(
            "select",
            None,
            output=lambda d: d / "model",
            owned=_out,
            verify=_selection_ok,
            resumable=True,  # a candidate's finished closed loop is kept (recipes/select.py)
            makes_model=True,
        ),
        Kind("eval", "eval", output=_metrics_file, owned=_metrics, verify=_metrics_ok),
        Kind(
            "closed-loop", "closed-loop", output=_metrics_file, owned=_metrics, verify=_metrics_ok
        ),
        Kind(
            "replay",
            "replay",
            output=lambda d: d / "replay",
            owned=lambda d: {"out": d / "replay"},
            verify=lambda d: (d / "replay").is_dir() and any((d / "replay").rglob(METRICS)),
        ),
    )
}

EVALUATIONS = ("eval", "closed-loop", "replay")
