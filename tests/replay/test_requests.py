"""`blockplan replay --requests`: follow another run's requests, window for window."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from blockplan.bags import BagWriter, TypestoreMessages, open_bag_reader, string_msg
from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.replay import run_replay
from blockplan.replay.requests import RequestsFileError, read_request_stamps
from blockplan.runtime import ConstantVelocityPlanner
from blockplan.types import Observation, Plan
from tests.replay.bagmaker import START_NS, BagSpec, make_bag


def _reasoning(plans_bag: Path) -> list[dict]:
    with open_bag_reader(plans_bag) as reader:
        return [json.loads(m.data) for _, m in reader.messages(["/planning/reasoning"])]


class SlowPlanner(ConstantVelocityPlanner):
    """250 ms per plan: with measured timing a request every third tick, as live."""

    def plan(self, observation: Observation) -> Plan:
        time.sleep(0.25)
        return super().plan(observation)


def test_replay_following_requests_plans_the_same_windows(tmp_path: Path) -> None:
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=3.0))
    # The reference: a run whose requests depend on its latency (what a live node does).
    slow = run_replay(bag, tmp_path / "slow", SlowPlanner(), PlannerConfig(), "measured")
    chosen = _reasoning(slow.plans_bag)
    assert len(chosen) >= 4
    assert all(r["accepted"] and r["window"]["stamp_ns"] == r["stamp_ns"] for r in chosen)
    requests = tmp_path / "reasoning.jsonl"
    requests.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    assert read_request_stamps(requests) == [r["stamp_ns"] for r in chosen]

    out = tmp_path / "followed"
    assert (
        main(
            [
                "replay",
                str(bag),
                "--out",
                str(out),
                "--model",
                "constant-velocity",
                "--requests",
                str(requests),
                "--no-progress",
            ]
        )
        == 0
    )
    followed = _reasoning(out / "plans.mcap")
    assert [r["window"]["frames"] for r in followed] == [r["window"]["frames"] for r in chosen]
    assert [r["waypoints"] for r in followed] == [r["waypoints"] for r in chosen]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["requests"] == {
        "given": len(chosen),
        "requested": len(chosen),
        "not_requested_ns": [],
    }
    assert metrics["plans"] == len(chosen)
    # A request at every tick picks other older frames for the same stamps (reuse_tolerance:
    # frames earlier requests used win), which is why the requests must be followed.
    every = {
        r["stamp_ns"]: r
        for r in _reasoning(
            run_replay(
                bag, tmp_path / "every", ConstantVelocityPlanner(), PlannerConfig()
            ).plans_bag
        )
    }
    assert any(every[r["stamp_ns"]]["window"]["frames"] != r["window"]["frames"] for r in chosen)


def test_request_stamps_from_a_bag_and_bad_files(tmp_path: Path) -> None:
    bag = tmp_path / "live.mcap"
    ns = TypestoreMessages()
    window = {
        "requested_ns": 0,
        "frames": {"front": [START_NS]},
        "ego_stamps_ns": [START_NS],
        "route_command": "lane_follow",
    }
    records = [
        {"stamp_ns": START_NS + i, "window": {**window, "stamp_ns": START_NS + i}}
        for i in (2, 1, 2)
    ]
    with BagWriter(bag) as writer:
        for i, record in enumerate(records):
            writer.write("/car1/planning/reasoning", string_msg(ns, json.dumps(record)), i + 1)
    assert read_request_stamps(bag) == [START_NS + 1, START_NS + 2]
    with pytest.raises(RequestsFileError, match="no such file"):
        read_request_stamps(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"stamp_ns": 1}\nnot json\n')
    with pytest.raises(RequestsFileError, match="bad.jsonl:2"):
        read_request_stamps(bad)
    old = tmp_path / "old.jsonl"
    old.write_text('{"stamp_ns": 1}\n')
    with pytest.raises(RequestsFileError, match="has no window"):
        read_request_stamps(old)
    other = make_bag(tmp_path / "inputs.mcap", BagSpec(duration_s=1.0))
    with pytest.raises(RequestsFileError, match="no \\*/planning/reasoning topic"):
        read_request_stamps(other)
