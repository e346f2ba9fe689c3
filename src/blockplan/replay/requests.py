"""The windows a live run planned for, for `blockplan replay --requests` (RUNTIME.md "Live
and offline").

A live node requests a plan whenever its inference worker is idle, so which windows it planned
for depends on its latency, and which frames a window holds on when each message arrived
(a tick can fall between two cameras' frames of the same instant; with
`frame_window.reuse_tolerance` > 0 the older frames depend on what earlier requests used).
Replay with `--timing ideal` requests one at every tick, with every frame in. Following the
live node's own windows (frame stamps per camera, degraded cameras, route command) makes
replay plan on exactly what the node saw.

The windows come from the reasoning records the node published (`/planning/reasoning`, one
per finished plan, accepted or rejected by the gates, each with its `window`): a JSON-lines
file of those records (as `blockplan play --observe DIR` writes to DIR/reasoning.jsonl), or
a ROS 2 bag that recorded the topic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockplan.bags import BagError, open_bag_reader
from blockplan.errors import UserError
from blockplan.runtime.plans import PlanWindow

REASONING_SUFFIX = "planning/reasoning"


class RequestsFileError(UserError, ValueError):
    """The requests file cannot be read; the message names the file and the problem."""


def _records_from_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise RequestsFileError(f"{path}:{number}: not a JSON record: {e}") from e
        if not isinstance(record, dict) or "stamp_ns" not in record:
            raise RequestsFileError(f"{path}:{number}: not a reasoning record (no stamp_ns)")
        records.append(record)
    return records


def _records_from_bag(path: Path) -> list[dict[str, Any]]:
    with open_bag_reader(path) as reader:
        topics = [t for t in reader.topics if t.endswith(REASONING_SUFFIX)]
        if not topics:
            raise RequestsFileError(f"{path}: the bag has no */{REASONING_SUFFIX} topic")
        return [json.loads(msg.data) for _, msg in reader.messages(topics)]


def read_request_windows(path: str | Path) -> list[PlanWindow]:
    """The windows (one per request stamp, in stamp order) of the reasoning records in
    `path`. Raises RequestsFileError naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise RequestsFileError(f"{path}: no such file")
    try:
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            records = _records_from_jsonl(path)
        else:
            records = _records_from_bag(path)
    except BagError as e:
        raise RequestsFileError(str(e)) from e
    if not records:
        raise RequestsFileError(f"{path}: no reasoning records")
    windows: dict[int, PlanWindow] = {}
    for record in records:
        if "window" not in record:
            raise RequestsFileError(
                f"{path}: the record of the plan at {record['stamp_ns']} ns has no window "
                "(recorded by a node that does not publish them)"
            )
        try:
            window = PlanWindow.from_json(record["window"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RequestsFileError(
                f"{path}: malformed window at {record['stamp_ns']}: {e!r}"
            ) from e
        windows.setdefault(window.stamp_ns, window)
    return [windows[s] for s in sorted(windows)]


def read_request_stamps(path: str | Path) -> list[int]:
    """The distinct request stamps (sorted) of the reasoning records in `path`."""
    return [w.stamp_ns for w in read_request_windows(path)]
