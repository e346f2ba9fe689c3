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
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.recipes.spec import REFERENCE, Recipe, RecipeError, Stage, check_stages, to_argv
from blockplan.recipes.stages import KINDS, OPERATIONS

log = logging.getLogger("blockplan.recipe")
RECORD = "stage.json"  # written when the stage finished and its output verified
STARTED = "stage.started.json"  # written when it started: what a rerun may continue
LOG = "stage.log"
BEFORE = "stage.before.json"  # a continued stage: the seconds its interrupted runs took


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


@dataclass
class _Prepared:
    """A stage about to run: its command line and the record it will get."""

    index: int
    stage: Stage
    folder: Path
    argv: list[str]
    expected: dict[str, Any]
    head: str
    before: float = 0.0  # seconds of the earlier, interrupted runs of a continued stage


class _Run:
    """One run of a recipe into `out`: what each stage would run now, which stages are done
    (their records), and the steps around a stage's command (prepare, start, finish)."""

    def __init__(self, recipe: Recipe, out: Path, scale: str, start: int, stream) -> None:
        self.recipe = recipe
        self.out = out
        self.scale = scale
        self.start = start  # stages from this index on run again (--from-stage)
        self.stream = stream
        self.records: dict[str, dict[str, Any]] = {}
        self.results: dict[int, StageResult] = {}

    def ready(self, stage: Stage) -> bool:
        """Every stage whose output `stage` reads is done."""
        return all(ref in self.records for ref in stage.references(self.scale))

    def prepare(self, i: int) -> _Prepared | None:
        """The stage's command line; None when it is skipped (done before, outputs verify)."""
        stage = self.recipe.stages[i]
        kind = KINDS[stage.run]
        folder = stage_folder(self.out, stage.name)
        where = f"{self.recipe.path}: stages[{i}] ({stage.name})"
        args = to_argv(
            stage.args_at(self.scale),
            kind.parser(),
            where,
            resolve=lambda text: resolve_reference(self.recipe, self.out, text),
        )
        argv = kind.argv(args, folder)
        expected = {
            "stage": stage.name,
            "run": stage.run,
            "argv": [str(a) for a in argv],
            "inputs": {ref: identity(self.records[ref]) for ref in stage.references(self.scale)},
        }
        head = f"[{i + 1}/{len(self.recipe.stages)}] {stage.name} ({stage.run})"
        record = read_record(folder)
        fresh = record is not None and all(record.get(k) == v for k, v in expected.items())
        if i < self.start and fresh and kind.verify(folder):
            self.say(f"{head}: done before, outputs verify; skipped")
            self.records[stage.name] = record  # type: ignore[assignment]
            self.results[i] = StageResult(
                stage, folder, kind.output(folder), argv, record["seconds"], True
            )
            return None
        return _Prepared(i, stage, folder, argv, expected, head)

    def begin(self, p: _Prepared) -> None:
        """Clear or keep the stage's folder and mark it started."""
        kind = KINDS[p.stage.run]
        started = _read_json(p.folder / STARTED)
        same_run = started == p.expected  # an interrupted run of this very command line
        if p.folder.exists() and (p.index >= self.start or not (kind.resumable and same_run)):
            shutil.rmtree(p.folder)  # a changed, forced or unresumable stage starts clean
        p.folder.mkdir(parents=True, exist_ok=True)
        (p.folder / RECORD).unlink(missing_ok=True)
        resumed = ""
        if (p.folder / STARTED).is_file():
            resumed = " (continuing)"
            p.before = _seconds_before(p.folder)
            (p.folder / BEFORE).write_text(json.dumps({"seconds": round(p.before, 1)}) + "\n")
        (p.folder / STARTED).write_text(json.dumps(p.expected, indent=2) + "\n")
        self.say(f"{p.head}{resumed}: log {p.folder / LOG}")

    def finish(self, p: _Prepared, seconds: float) -> None:
        """Verify the stage's output and record it."""
        kind = KINDS[p.stage.run]
        if not kind.verify(p.folder):
            raise RecipeError(
                f"stage {p.stage.name!r} finished but its output does not verify "
                f"({kind.output(p.folder)}); see {p.folder / LOG}"
            )
        total = seconds + p.before
        record = {**p.expected, "run_id": uuid.uuid4().hex, "seconds": round(total, 1)}
        (p.folder / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        self.records[p.stage.name] = record
        earlier = f" ({total / 60:.1f} in all)" if p.before else ""
        self.say(f"{p.head}: done in {seconds / 60:.1f} min{earlier}")
        self.results[p.index] = StageResult(
            p.stage, p.folder, kind.output(p.folder), p.argv, total, False
        )

    def say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def run_recipe(
    recipe: Recipe,
    out: Path,
    scale: str = "full",
    from_stage: str | None = None,
    stream=None,
    jobs: int = 1,
) -> list[StageResult]:
    """Run (or resume) every stage of `recipe` into `out`; returns one result per stage, in
    the recipe's order. `jobs` > 1 runs up to that many stages at once, each as soon as the
    stages it reads are done; their output then goes to their logs only."""
    check_stages(recipe, scale)
    if jobs < 1:
        raise RecipeError(f"--jobs {jobs}: must be >= 1")
    stream = stream if stream is not None else sys.stderr
    names = [s.name for s in recipe.stages]
    if from_stage is not None and from_stage not in names:
        raise RecipeError(f"--from-stage {from_stage!r}: no such stage (stages: {recipe.names()})")
    start = names.index(from_stage) if from_stage else len(names)
    out.mkdir(parents=True, exist_ok=True)
    _check_scale(out, scale)
    run = _Run(recipe, out, scale, start, stream)
    _schedule(run, jobs)
    return [run.results[i] for i in range(len(names))]


def _schedule(run: _Run, jobs: int) -> None:
    """Up to `jobs` stages at once, in the recipe's order among those whose inputs are done
    (one job: the recipe's order, the running stage's output echoed to the terminal); after a
    failure no new stage starts, the running ones finish, and the first error is raised.
    Ctrl-C is passed on to every running stage."""
    stages = run.recipe.stages
    pending = list(range(len(stages)))
    running: dict[Future, tuple[_Prepared, float]] = {}
    children: set[subprocess.Popen] = set()
    echo = run.stream if jobs == 1 else None  # several stages at once: their logs only
    failure: Exception | None = None
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while pending or running:
                while failure is None and len(running) < jobs:
                    i = next((i for i in pending if run.ready(stages[i])), None)
                    if i is None:
                        break
                    pending.remove(i)
                    prepared = run.prepare(i)
                    if prepared is None:
                        continue
                    run.begin(prepared)
                    future = pool.submit(
                        _run_stage, prepared.stage, prepared.argv, prepared.folder, echo, children
                    )
                    running[future] = (prepared, time.monotonic())
                if not running:
                    break  # a failure left stages waiting on it
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    prepared, t0 = running.pop(future)
                    try:
                        future.result()
                        run.finish(prepared, time.monotonic() - t0)
                    except Exception as e:  # a stage's error, raised once the others end
                        failure = failure or e
        except KeyboardInterrupt:
            for child in list(children):
                child.send_signal(signal.SIGINT)
            wait(running)
            raise
    if failure is not None:
        raise failure


@dataclass(frozen=True)
class StageStatus:
    name: str
    state: str  # done | started | changed | ready | waiting
    minutes: float | None  # done: its time; started: so far
    note: str  # started: the log's last line; waiting: the stages it waits for


def recipe_status(recipe: Recipe, out: Path, scale: str = "full") -> list[StageStatus]:
    """Where a run of `recipe` in `out` stands, stage by stage, without touching it: done
    (its record matches and its output verifies), started (its folder holds an unfinished
    run of this very command: running now, or interrupted and continued by the next `run`),
    changed (what is there was made by another command line: it runs again), ready (it
    would start now) or waiting (on the stages named)."""
    check_stages(recipe, scale)
    before = _read_json(out / "recipe.json") or {}
    if before.get("scale") not in (None, scale):
        raise RecipeError(f"{out}: holds a {before['scale']}-scale run, not {scale}")
    rows = []
    run = _Run(recipe, out, scale, len(recipe.stages), io.StringIO())  # its lines unsaid
    for i, stage in enumerate(recipe.stages):
        missing = [ref for ref in stage.references(scale) if ref not in run.records]
        if missing:
            rows.append(StageStatus(stage.name, "waiting", None, ", ".join(missing)))
            continue
        prepared = run.prepare(i)
        if prepared is None:
            rows.append(StageStatus(stage.name, "done", run.results[i].seconds / 60, ""))
            continue
        folder = prepared.folder
        started = _read_json(folder / STARTED)
        if started == prepared.expected and read_record(folder) is None:
            rows.append(_started(stage, folder))
        elif folder.exists() and (started is not None or read_record(folder) is not None):
            rows.append(StageStatus(stage.name, "changed", None, "runs again"))
        else:
            rows.append(StageStatus(stage.name, "ready", None, ""))
    return rows


def _started(stage: Stage, folder: Path) -> StageStatus:
    """A started stage: its time to its folder's last write (earlier runs included), how far
    it got (a data set's episodes, else its log's last line) and how long ago that write was
    (a stage written to minutes ago is likely running)."""
    last = max(p.stat().st_mtime for p in [folder, *folder.iterdir()])
    started = (folder / STARTED).stat().st_mtime
    before = float((_read_json(folder / BEFORE) or {}).get("seconds", 0.0))
    manifest = _read_json(folder / "manifest.json") if stage.run == "dataset" else None
    if manifest is not None:
        options = manifest.get("options", {})
        wanted = len(options.get("scenarios", [])) * int(options.get("episodes", 0))
        done = f"{len(manifest.get('episodes', []))} of {wanted} episodes kept"
    else:
        done = _tail(folder / LOG)[:90] if (folder / LOG).is_file() else ""
    idle = (time.time() - last) / 60
    note = f"{done} (last write {idle:.0f} min ago)"
    return StageStatus(stage.name, "started", (before + max(0.0, last - started)) / 60, note)


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


def _seconds_before(folder: Path) -> float:
    """A continued stage's seconds so far: its earlier runs' (`BEFORE`) and the interrupted
    one's, from its start (the mtime of `STARTED`) to its log's last write."""
    before = float((_read_json(folder / BEFORE) or {}).get("seconds", 0.0))
    log, started = folder / LOG, folder / STARTED
    if log.is_file():
        before += max(0.0, log.stat().st_mtime - started.stat().st_mtime)
    return before


def _run_stage(
    stage: Stage, argv: list[str], folder: Path, stream, children: set | None = None
) -> None:
    """Run the stage's command into its log (and `stream`, unless None); `children` holds
    the child process while it runs (for Ctrl-C under `--jobs`). A continued stage's log
    keeps what its earlier runs wrote."""
    kind = KINDS[stage.run]
    if kind.command is None:
        parser, operation = OPERATIONS[stage.run]
        with open(folder / LOG, "a") as log_file:
            log_file.write(f"recipe {stage.run} {' '.join(map(str, argv))}\n")
            operation(parser().parse_args([str(a) for a in argv]))
        return
    command = [sys.executable, "-m", "blockplan.cli", kind.command, *map(str, argv)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(folder / LOG, "ab") as log_file:
        log_file.write(("$ blockplan " + " ".join(command[3:]) + "\n").encode())
        log_file.flush()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        assert child.stdout is not None
        if children is not None:
            children.add(child)
        try:
            while chunk := child.stdout.read1(4096):  # type: ignore[attr-defined]
                log_file.write(chunk)
                if stream is not None:
                    _echo(stream, chunk)
            code = child.wait()
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reaches the child too; a signal sent to this process
            # alone is passed on. Either way the child saves what it can and stops.
            child.send_signal(signal.SIGINT)
            child.wait()
            raise
        finally:
            if children is not None:
                children.discard(child)
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
