"""The `blockplan` command.

Each subcommand lives in `blockplan.commands.<name>` and exposes `add_arguments(parser)` and
`run(args) -> int`; its one-line help is in `COMMAND_HELP` here. Modules are imported only
when their command runs, so `blockplan --help` stays fast and a missing optional dependency
breaks only the command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys

from blockplan import __version__
from blockplan.errors import UserError

log = logging.getLogger("blockplan")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C

# Subcommands in the order `--help` lists them: name -> module under blockplan.commands.
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "simulate": "simulate",
    "dataset": "dataset",
    "robot-demos": "robot_demos",
    "robot-scenes": "robot_scenes",
    "train": "train",
    "train-drafter": "train_drafter",
    "eval": "eval",
    "replay": "replay",
    "soak": "soak",
    "play": "play",
    "closed-loop": "closed_loop",
    "schema": "schema",
    "bench": "bench",
    "bench-sim": "bench_sim",
    "export": "export",
    "quantize": "quantize",
    "build-engine": "build_engine",
    "config": "config",
    "recipe": "recipe",
}

# One-line help per command, kept here so `--help` imports no command module.
COMMAND_HELP: dict[str, str] = {
    "demo": "simulate a short scenario, replay it with the shipped model, write the report",
    "simulate": "simulate a highway-env episode with the expert and write a ROS 2 bag",
    "dataset": "generate a sharded train/val/test data set from the simulator (and a Fast-dDrive "
    "JSON export) or from recorded bags (--from-bags)",
    "robot-demos": "record Meta-World scripted-expert demonstrations as ROS 2 bags and build a robot data set",
    "robot-scenes": "render many Meta-World layouts labelled with object, goal and hand positions (tower pretraining)",
    "train": "train a planner (SASD recipe) on simulator shards or Fast-dDrive JSON; torchrun for DDP",
    "train-drafter": "train a DFlash drafter on a model's own greedy answers (decoding.strategy: dflash)",
    "eval": "open-loop evaluation on a test split: the model, N=4 rollouts and two baselines",
    "replay": "replay a ROS 2 bag through the control loop: plans.mcap, metrics.json, report.html",
    "soak": "run the control loop for a virtual time on a looped bag: memory, latency, fallbacks per minute",
    "play": "play a ROS 2 bag into a live ROS 2 graph (like ros2 bag play; needs rclpy)",
    "closed-loop": "drive the ego in highway-env with the planner (closed loop) next to the expert and CV",
    "schema": "show the answer scaffold per section (editable/scaffold tokens, blocks)",
    "bench": "benchmark the decoding strategies (latency, forwards, tokens per step)",
    "bench-sim": "benchmark the simulator: simulation steps/s per scenario, render ms per camera",
    "export": "export the model as static-shape ONNX graphs (vision per frame, decoder step)",
    "quantize": "write a quantized model folder (linears as int8, fp8 or w4; ORT INT8 graphs)",
    "build-engine": "build TensorRT engines from an export folder (fp16, fp8 or int8)",
    "config": "validate a params file and print the resolved configuration",
    "recipe": "make a model from its recipe (recipes/*.yaml): data, training, evaluation, card",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blockplan",
        description="Block-diffusion VLA planner: simulate, replay, benchmark, train, export.",
    )
    parser.add_argument("--version", action="version", version=f"blockplan {__version__}")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    verbosity.add_argument(
        "-q", "--quiet", action="store_true", help="log warnings and errors only"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        sub.add_parser(name, help=COMMAND_HELP[name], add_help=False)
    return parser


def _command_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    module = importlib.import_module(f"blockplan.commands.{COMMANDS[name]}")
    parser = argparse.ArgumentParser(prog=f"blockplan {name}", description=COMMAND_HELP[name])
    module.add_arguments(parser)
    return parser, module


QUIET_LIBRARIES = ("OpenGL",)  # INFO at import (no OpenGL_accelerate): noise for our users


def setup_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if hasattr(signal, "SIGPIPE"):  # `blockplan ... | head` ends quietly, like other CLI tools
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    # Global options come before the command; everything after it belongs to the command.
    command_index = next((i for i, a in enumerate(argv) if a in COMMANDS), None)
    global_args = argv if command_index is None else argv[:command_index]
    args = parser.parse_args(global_args)
    if command_index is None:
        parser.print_help()
        return 0 if not argv else 2
    setup_logging(args.verbose, args.quiet)
    name = argv[command_index]
    command_parser, module = _command_parser(name)
    command_args = command_parser.parse_args(argv[command_index + 1 :])
    return run_command(module, command_args)


def run_command(module: object, args: argparse.Namespace) -> int:
    """Run one command with the one error path every command shares: a `UserError` or an
    `OSError` (a full disk, a read-only folder) is one line and exit status 1 (`-v` logs the
    traceback); Ctrl-C is one line and 130, the shells' status for SIGINT."""
    try:
        check_report_path(args)
        return int(module.run(args) or 0)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UserError, OSError) as e:
        log.debug("the error in full:", exc_info=True)
        print(f"error: {error_line(e)}", file=sys.stderr)
        return 1


def check_report_path(args: argparse.Namespace) -> None:
    """A command's report file (`--json PATH`; `config` and `schema` use `--json` as a switch)
    is checked before the command runs: a path that cannot take it fails now, not after an
    evaluation or a hundred episodes."""
    path = getattr(args, "json", None)
    if isinstance(path, str):
        from blockplan.commands.outputs import check_output_file

        check_output_file(path)


def error_line(error: BaseException) -> str:
    """One line for an error: its message (an OSError's strerror with the file it names)."""
    if isinstance(error, OSError) and not isinstance(error, UserError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror}"
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
