"""Output files of the commands that write one report (`--json`): checked before the work,
written at its end, so that a path that cannot take the file fails in the first second, not
after an evaluation or a hundred episodes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from blockplan.errors import UserError


class OutputPathError(UserError, ValueError):
    """A report file cannot be written where asked; the message names the flag and why."""


def check_output_file(path: str | Path, flag: str = "--json") -> Path:
    """`path` as a Path, or an OutputPathError when the file could not be written there: it
    is a folder, a parent is a file, or the nearest existing parent folder is not writable.
    Creates nothing (a failed run leaves no empty folders behind)."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{flag} {path} is a folder; pass a file path")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputPathError(f"{flag} {path}: cannot create it: {blocker} is a file")
    existing = next(p for p in (path, *path.parents) if p.exists() or p == Path(p.anchor))
    folder = existing if existing != path else path.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {path}: cannot write there: {folder} is not writable")
    return path


def write_json_file(path: str | Path, doc: Any) -> Path:
    """Write `doc` as indented JSON to `path`, creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def print_report(report: Any, path: str | Path | None) -> None:
    """Print a command's JSON report; also write it to `path` (`--json`) when given."""
    print(json.dumps(report, indent=2))
    if path:
        write_json_file(path, report)
