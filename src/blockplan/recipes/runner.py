"""Run a recipe: its stages in order, each skipped when its outputs exist and verify.

Every stage has a folder `OUT/stages/NAME` with its outputs, its log (`stage.log`, the
command's whole output) and, once it finished and its output verified, `stage.json`: the
command line it ran and the identity of the inputs it read. A rerun skips a stage whose
record matches what it would run now and whose output still verifies; a stage interrupted
midway (Ctrl-C, a reboot) runs again, and `dataset` and `train` continue where they stopped.
A changed stage, and `--from-stage NAME` and every stage after it, start from an empty folder.
At the end the shipped stage's model folder is copied to `OUT/model` with a generated
`MODEL_CARD.md` and a manifest over every file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.recipes.spec import REFERENCE, Recipe, RecipeError, Stage, check_stages, to_argv
from blockplan.recipes.stages import KINDS, OPERATIONS

log = logging.getLogger("blockplan.recipe")
RECORD = "stage.json"  # written when the stage finished and its output verified
STARTED = "stage.started.json"  # written when it started: what a rerun may continue
LOG = "stage.log"


@dataclass
class StageResult:
    stage: Stage
    folder: Path
    output: Path
    argv: list[str]
    seconds: float
    skipped: bool


def stage_folder(out: Path, name: str) -> Path:
    return out / "stages" / name


def resolve_reference(recipe: Recipe, out: Path, text: str) -> str:
    def output(match) -> str:
        stage = recipe.stage(match.group(1))
        folder = stage_folder(out, stage.name)
        inside = match.group(2)
        if inside is not None:
            if ".." in Path(inside).parts or inside.startswith("/"):
                raise RecipeError(f"{{{match.group(1)}:{inside}}}: a path inside the stage only")
            return str(folder / inside)
        return str(KINDS[stage.run].output(folder))

    return REFERENCE.sub(output, text)


def identity(record: dict[str, Any]) -> str:
    """What a later stage records of this one: its command line, its inputs and which run
    made its output (a stage that ran again reruns every stage that reads it)."""
    core = {k: record.get(k) for k in ("run", "argv", "inputs", "run_id")}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def read_record(folder: Path) -> dict[str, Any] | None:
    record = _read_json(folder / RECORD)
    return record if record is not None and "argv" in record else None


def run_recipe(
    recipe: Recipe,
    out: Path,
    scale: str = "full",
    from_stage: str | None = None,
    stream=None,
) -> list[StageResult]:
    """Run (or resume) every stage of `recipe` into `out`; returns one result per stage."""
    check_stages(recipe, scale)
    stream = stream if stream is not None else sys.stderr
    names = [s.name for s in recipe.stages]
    if from_stage is not None and from_stage not in names:
        raise RecipeError(f"--from-stage {from_stage!r}: no such stage (stages: {recipe.names()})")
    start = names.index(from_stage) if from_stage else len(names)
    out.mkdir(parents=True, exist_ok=True)
    _check_scale(out, scale)
    records: dict[str, dict[str, Any]] = {}
    results: list[StageResult] = []
    for i, stage in enumerate(recipe.stages):
        kind = KINDS[stage.run]
        folder = stage_folder(out, stage.name)
        where = f"{recipe.path}: stages[{i}] ({stage.name})"
        args = to_argv(
            stage.args_at(scale),
            kind.parser(),
            where,
            resolve=lambda text: resolve_reference(recipe, out, text),
        )
        argv = kind.argv(args, folder)
        expected = {
            "stage": stage.name,
            "run": stage.run,
            "argv": [str(a) for a in argv],
            "inputs": {ref: identity(records[ref]) for ref in stage.references(scale)},
        }
        head = f"[{i + 1}/{len(names)}] {stage.name} ({stage.run})"
        record = read_record(folder)
        fresh = record is not None and all(record.get(k) == v for k, v in expected.items())
        if i < start and fresh and kind.verify(folder):
            print(f"{head}: done before, outputs verify; skipped", file=stream, flush=True)
            records[stage.name] = record  # type: ignore[assignment]
            results.append(
                StageResult(stage, folder, kind.output(folder), argv, record["seconds"], True)
            )
            continue
        started = _read_json(folder / STARTED)
        same_run = started == expected  # an interrupted run of this very command line
        if folder.exists() and (i >= start or not (kind.resumable and same_run)):
            shutil.rmtree(folder)  # a changed, forced or unresumable stage starts clean
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RECORD).unlink(missing_ok=True)
        resumed = " (continuing)" if (folder / STARTED).is_file() else ""
        (folder / STARTED).write_text(json.dumps(expected, indent=2) + "\n")
        print(f"{head}{resumed}: log {folder / LOG}", file=stream, flush=True)
        t0 = time.monotonic()
        _run_stage(stage, argv, folder, stream)
        seconds = time.monotonic() - t0
        if not kind.verify(folder):
            raise RecipeError(
                f"stage {stage.name!r} finished but its output does not verify "
                f"({kind.output(folder)}); see {folder / LOG}"
            )
        record = {**expected, "run_id": uuid.uuid4().hex, "seconds": round(seconds, 1)}
        (folder / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        records[stage.name] = record
        print(f"{head}: done in {seconds / 60:.1f} min", file=stream, flush=True)
        results.append(StageResult(stage, folder, kind.output(folder), argv, seconds, False))
    return results


def _check_scale(out: Path, scale: str) -> None:
    """One output folder holds one scale: a smoke run never passes for a full one."""
    path = out / "recipe.json"
    if path.is_file():
        try:
            before = json.loads(path.read_text()).get("scale")
        except (OSError, json.JSONDecodeError, AttributeError):
            before = None
        if before not in (None, scale):
            raise RecipeError(f"{out}: holds a {before}-scale run; use another --out for {scale}")
    path.write_text(json.dumps({"scale": scale}) + "\n")


def _run_stage(stage: Stage, argv: list[str], folder: Path, stream) -> None:
    kind = KINDS[stage.run]
    if kind.command is None:
        parser, operation = OPERATIONS[stage.run]
        with open(folder / LOG, "w") as log_file:
            log_file.write(f"recipe {stage.run} {' '.join(map(str, argv))}\n")
            operation(parser().parse_args([str(a) for a in argv]))
        return
    command = [sys.executable, "-m", "blockplan.cli", kind.command, *map(str, argv)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(folder / LOG, "wb") as log_file:
        log_file.write(("$ blockplan " + " ".join(command[3:]) + "\n").encode())
        log_file.flush()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        assert child.stdout is not None
        try:
            while chunk := child.stdout.read1(4096):  # type: ignore[attr-defined]
                log_file.write(chunk)
                _echo(stream, chunk)
            code = child.wait()
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reaches the child too; a signal sent to this process
            # alone is passed on. Either way the child saves what it can and stops.
            child.send_signal(signal.SIGINT)
            child.wait()
            raise
    if code != 0:
        tail = _tail(folder / LOG)
        raise RecipeError(
            f"stage {stage.name!r}: `blockplan {kind.command}` exited {code}: {tail} "
            f"(whole log: {folder / LOG})"
        )


def _echo(stream, chunk: bytes) -> None:
    try:
        stream.write(chunk.decode(errors="replace"))
        stream.flush()
    except (OSError, ValueError):
        pass  # the terminal went away; the log still has it


def _tail(path: Path) -> str:
    lines = [
        line.strip()
        for line in path.read_text(errors="replace").replace("\r", "\n").splitlines()
        if line.strip()
    ]
    return lines[-1] if lines else "no output"
