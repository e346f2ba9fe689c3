"""`blockplan soak`: the runtime on a looped bag for a virtual time, metrics per virtual minute."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.planner.embodiment import robot_config
from blockplan.replay import soak
from blockplan.replay.planners import load_planner
from blockplan.replay.soak import MINUTE_NS, SoakRecorder, default_windows
from blockplan.types import ActionPlan
from tests.replay.bagmaker import BagSpec, make_bag

PERIOD = 100_000_000  # 10 Hz

ROW_KEYS = {"minute", "loop", "ticks", "published", "plans", "inferences", "fallbacks",
            "boundary_fallbacks", "other_fallbacks", "plan_latency_ms", "plan_cpu_ms", "tick_ms",
            "rss_mb",
            "heap_objects", "queues", "wall_s", "cpu_s", "cpu_ms_per_plan", "load_avg_1m"}  # fmt: skip
TARGETS = {"rss_growth", "latency_p99_drift", "plan_cpu_p99_drift", "every_tick_publishes",
           "fallbacks_beyond_loop_boundaries"}  # fmt: skip


def _recorder(tmp_path: Path, minutes: float, **kw) -> SoakRecorder:
    return SoakRecorder(tmp_path, minutes, PERIOD, 2.0, lambda: {"q": 3}, {"model": "x"}, **kw)


def test_recorder_rows_targets_and_partial_minutes(tmp_path):
    rec = _recorder(tmp_path, 2.5)
    rec.loop_started(0, 0)
    now, ticks = 0, 0
    while not rec.done:
        if now == 70 * 10**9:
            rec.loop_started(1, now)  # a second pass: its first 2 s are a loop boundary
        fallback = now in (0, 70 * 10**9 + PERIOD, 100 * 10**9)  # the last one is not at a loop
        rec.on_latency("inference", 40_000_000 + (now // PERIOD) % 7)
        rec.on_latency("tick", 1_000_000)
        rec.on_tick(now, True, fallback, 1)
        if now == 61 * 10**9:  # written after each minute: a killed run leaves them readable
            assert len(json.loads((tmp_path / "metrics.json").read_text())["minutes_rows"]) == 1
        ticks += 1
        now += PERIOD
    metrics = rec.finish({"time_jumps": 0})
    rows = metrics["minutes_rows"]
    assert [r["minute"] for r in rows] == [1, 2, 3]
    assert [r["ticks"] for r in rows] == [600, 600, 300]  # 2.5 minutes at 10 Hz
    assert all(set(r) == ROW_KEYS for r in rows)
    assert [(r["fallbacks"], r["boundary_fallbacks"]) for r in rows] == [(1, 1), (2, 1), (0, 0)]
    assert rows[0]["queues"] == {"q": 3} and rows[1]["loop"] == 1
    assert set(metrics["targets"]) == TARGETS
    t = metrics["targets"]
    assert t["every_tick_publishes"]["met"] and t["every_tick_publishes"]["ticks"] == 1500
    assert t["fallbacks_beyond_loop_boundaries"] == {
        **t["fallbacks_beyond_loop_boundaries"], "boundary_fallbacks": 2, "other_fallbacks": 1,
        "met": False}  # fmt: skip
    assert not metrics["targets_met"]
    assert metrics["complete"] and metrics["summary"]["virtual_minutes"] == 2.5
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["minutes_rows"] == rows and on_disk["summary"]["ticks"] == 1500
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
    assert "Per minute" in (tmp_path / "report.html").read_text()


def test_recorder_flags_a_clock_going_back_a_gap_and_an_unpublished_tick(tmp_path):
    rec = _recorder(tmp_path, 1.0)
    rec.loop_started(0, 0)
    for now, published in ((0, True), (PERIOD, True), (3 * PERIOD, True), (2 * PERIOD, False)):
        rec.on_tick(now, published, False, 0)
    t = rec.finish({"time_jumps": 0}, interrupted=True)["targets"]["every_tick_publishes"]
    assert (t["ticks"], t["published"], t["tick_gaps"], t["clock_backwards"]) == (4, 3, 1, 1)
    assert t["met"] is False


def test_recorder_rss_and_latency_drift_targets(tmp_path, monkeypatch):
    rss = iter([100.0, 100.0, 102.0, 104.0, 106.0, 200.0])
    monkeypatch.setattr(soak, "rss_mb", lambda: next(rss))
    rec = _recorder(tmp_path, 4.0, warmup_minutes=1, window_minutes=2)
    rec.loop_started(0, 0)
    now = 0
    while not rec.done:
        minute = now // MINUTE_NS
        rec.on_latency("inference", (10 if minute < 2 else 12) * 1_000_000)
        rec.on_latency("inference_cpu", (8 if minute < 2 else 8.4) * 1_000_000)  # +5 %
        rec.on_tick(now, True, False, 1)
        now += PERIOD
    t = rec.finish({"time_jumps": 0})["targets"]
    assert t["rss_growth"]["after_warmup_mb"] == 100.0 and t["rss_growth"]["end_mb"] == 106.0
    assert t["rss_growth"]["growth_pct"] == 6.0 and t["rss_growth"]["met"] is False
    assert t["latency_p99_drift"]["first_p99_ms"] == 10.0
    assert t["latency_p99_drift"]["change_pct"] == 20.0 and not t["latency_p99_drift"]["met"]
    # the planning thread's CPU time: the software's own drift, apart from the wait for a core
    cpu = t["plan_cpu_p99_drift"]
    assert (cpu["first_p99_ms"], cpu["last_p99_ms"], cpu["change_pct"]) == (8.0, 8.4, 5.0)
    assert cpu["met"] is True


def test_default_windows_scale_down():
    assert default_windows(60) == (5, 10)
    assert default_windows(20) == (2, 10)
    assert default_windows(2) == (1, 1)
    assert default_windows(0.5) == (1, 1)


@pytest.fixture(scope="module")
def short_bag(tmp_path_factory) -> Path:
    return make_bag(tmp_path_factory.mktemp("soak") / "short.mcap", BagSpec(duration_s=6.0))


def test_vehicle_soak_loops_the_bag_on_a_clock_that_only_moves_forward(
    short_bag, tmp_path, monkeypatch
):
    seen: list[int] = []
    on_tick = SoakRecorder.on_tick

    def spy(self, now_ns, published, is_fallback, new_plans):
        on_tick(self, now_ns, published, is_fallback, new_plans)
        if not self.done:  # counted (the tick that ends the soak is not)
            seen.append(now_ns)

    monkeypatch.setattr(SoakRecorder, "on_tick", spy)
    config = PlannerConfig()
    planner = load_planner("constant-velocity", config)
    metrics = soak.soak_vehicle(short_bag, planner, config, 0.2, tmp_path, {"model": "cv"})
    ticks = np.asarray(seen)
    assert len(ticks) == 120  # 12 virtual seconds at 10 Hz
    assert (np.diff(ticks) == PERIOD).all()  # across the passes too: no gap, never back
    starts = metrics["loop_starts_ns"]
    assert len(starts) >= 2 and metrics["summary"]["loops"] == len(starts)  # a 6 s bag
    assert (np.diff(starts) > 5.9e9).all()  # each pass restamped after the one before
    s, t = metrics["summary"], metrics["targets"]
    assert s["published"] == s["ticks"] == 120 and s["plans"] > 80
    assert t["every_tick_publishes"]["met"] is True
    assert metrics["runtime_counters"]["time_jumps"] == 0
    assert t["fallbacks_beyond_loop_boundaries"]["other_fallbacks"] == 0
    row = metrics["minutes_rows"][0]
    assert row["rss_mb"] > 0 and row["heap_objects"] > 0 and row["plan_latency_ms"]["p99"] > 0
    # the planning thread's CPU time, sample by sample within the plan's wall time
    cpu, wall = row["plan_cpu_ms"], row["plan_latency_ms"]
    assert cpu["p99"] is not None and cpu["p50"] <= wall["p50"] + 1e-3
    assert cpu["p99"] <= wall["p99"] + 1e-3
    assert {"frames_buffered", "ego_history", "worker_pending", "events"} <= set(row["queues"])
    assert json.loads((tmp_path / "metrics.json").read_text())["complete"] is True


@dataclasses.dataclass
class _Schema:
    horizon: int = 8
    action_dim: int = 4
    proprio_dim: int = 9


class _ChunkPlanner:
    """Robot planner stand-in: a zero chunk of 8 steps."""

    schema = _Schema()

    def plan(self, observation):
        actions = np.zeros((8, 4))
        return ActionPlan(observation.stamp_ns, actions, np.zeros((8, 4), int), actions[None])


@pytest.fixture(scope="module")
def robot_bag(tmp_path_factory) -> Path:
    """2 s of a robot episode (80 Hz joints, 20 Hz cameras)."""
    from blockplan.sim.manipulation import Demonstration
    from blockplan.sim.robot_bag import write_demo_bag

    rng = np.random.default_rng(0)
    steps = 160
    joints = np.tile([1.89, -0.58, -0.98, 1.64, 0.94, 1.04, 2.29, 0.0, 0.0], (steps, 1))
    frames = {t: {c: rng.integers(0, 255, (16, 16, 3), dtype=np.uint8) for c in ("front", "wrist")}
              for t in range(0, steps, 4)}  # fmt: skip
    demo = Demonstration("reach", 0, "reach the red goal marker", joints, np.zeros_like(joints),
                         np.zeros((steps, 4)), frames, True, steps)  # fmt: skip
    path = tmp_path_factory.mktemp("robot") / "robot.mcap"
    write_demo_bag(demo, path, extra={"render_every": 4})
    return path


def test_robot_soak_loops_the_episode_and_every_step_publishes(robot_bag, tmp_path):
    config = robot_config(PlannerConfig(), ("front", "wrist"), 1).with_params(
        {"control.rate_hz": 80.0, "robot.instruction": "reach the red goal marker"}
    )
    metrics = soak.soak_robot(robot_bag, _ChunkPlanner(), config, 0.1, tmp_path)
    s, t = metrics["summary"], metrics["targets"]
    assert s["ticks"] == s["published"] == 480  # 6 s at 80 Hz
    assert s["loops"] == 3 and t["every_tick_publishes"]["met"] is True
    assert metrics["runtime_counters"]["time_jumps"] == 0 and s["plans"] > 100
    assert t["fallbacks_beyond_loop_boundaries"]["other_fallbacks"] == 0
    assert "recent_chunks" in metrics["minutes_rows"][0]["queues"]


def test_cli_soak_writes_its_outputs_and_refuses_an_earlier_soak(short_bag, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["soak", "--bag", str(short_bag), "--model", "constant-velocity", "--out", str(out)]
    assert main([*args, "--minutes", "0.1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "every_tick_publishes" in printed and "60 ticks" in printed
    assert {p.name for p in out.iterdir()} >= {"metrics.json", "soak.png", "report.html"}
    assert main([*args, "--minutes", "0.1"]) == 1  # a UserError: metrics.json exists
    assert "exists" in capsys.readouterr().err
    assert main(["soak", "--minutes", "0", "--out", str(tmp_path / "x")]) == 1


@pytest.mark.slow
def test_shipped_models_soak_a_virtual_minute(short_bag, robot_bag, tmp_path):
    """The shipped driving and robot models, one virtual minute each (about a minute)."""
    from blockplan.commands.closed_loop import robot_planner

    config = PlannerConfig()
    planner = load_planner("models/blockplan-tiny", config)
    m = soak.soak_vehicle(short_bag, planner, config, 0.2, tmp_path / "drive")
    assert m["targets"]["every_tick_publishes"]["met"] and m["summary"]["plans"] > 60
    config, planner = robot_planner("models/blockplan-robot-tiny", None, None, 80.0)
    m = soak.soak_robot(robot_bag, planner, config, 0.05, tmp_path / "robot")
    assert m["targets"]["every_tick_publishes"]["met"] and m["summary"]["ticks"] == 240
