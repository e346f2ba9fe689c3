"""The request stamps a live run made, for `blockplan replay --requests` (RUNTIME.md "Live
and offline").

A live node requests a plan whenever its inference worker is idle, so which windows it planned
for depends on its latency; replay with `--timing ideal` requests one at every tick. Replaying
the live node's own request stamps makes the two plan for the same windows: with
`frame_window.reuse_tolerance` > 0 a window's older frames depend on which frames earlier
requests used, so only the same sequence of requests gives the same windows.

The stamps come from the reasoning records the node published (`/planning/reasoning`, one
per finished plan, accepted or rejected by the gates): a JSON-lines file of those records (as
`blockplan play --observe DIR` writes to DIR/reasoning.jsonl), or a ROS 2 bag that recorded
the topic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockplan.bags import BagError, open_bag_reader

REASONING_SUFFIX = "planning/reasoning"


class RequestsFileError(ValueError):
    """The requests file cannot be read; the message names the file and the problem."""


def request_stamp(record: dict[str, Any]) -> int:
    """A reasoning record's request stamp t0 (its window's stamp, or the plan's)."""
    window = record.get("window") or {}
    return int(window.get("stamp_ns", record["stamp_ns"]))


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


def read_request_stamps(path: str | Path) -> list[int]:
    """The distinct request stamps (sorted) of the reasoning records in `path`."""
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
    return sorted({request_stamp(r) for r in records})
