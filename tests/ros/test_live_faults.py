"""Faults in a live graph on wall time: the bag is played restamped to now (`blockplan play
--restamp`); the rear camera goes silent, then the odometry stops, then the player is killed.
The node keeps publishing at the control rate throughout, says why on /diagnostics, and
survives."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.ros.live import CAMERA_TOPICS, STARTUP_TIMEOUT_S, assert_clean_exit, watch

pytestmark = pytest.mark.ros

RATE_HZ = 10.0
REAR_SILENT_S, ODOM_STOPS_S, PLAYER_DIES_S, END_S = 2.0, 4.0, 6.0, 8.5


def _statuses(diagnostics, since_s: float, until_s: float, t0: float):
    """name → statuses of the diagnostics that arrived in [since, until) s after t0."""
    out: dict[str, list[dict]] = {}
    for d in diagnostics:
        t = d["wall_ns"] / 1e9 - t0
        if since_s <= t < until_s:
            for s in d["statuses"]:
                out.setdefault(s["name"], []).append(s)
    return out


def test_camera_silent_odometry_stopped_player_killed(graph, raw_bag):
    launch = graph.launch()  # wall time
    with watch(graph.domain_id) as w:
        w.wait_state("active", timeout_s=STARTUP_TIMEOUT_S)
        play = graph.play(
            raw_bag,
            "--restamp",
            "--silence",
            f"/camera/rear/image_raw@{REAR_SILENT_S}",
            "--silence",
            f"/odom@{ODOM_STOPS_S}",
            "--wait-for",
            *CAMERA_TOPICS,
            "/odom",
        )
        started = play.wait_output("at wall time", 30.0)
        t0 = int(started.split("at wall time ")[1].split()[0]) / 1e9  # bag time 0
        assert _wait_for_plan(w.seen, 15.0), play.output[-2000:]
        time.sleep(max(0.0, PLAYER_DIES_S - (time.time() - t0)))
        os.killpg(play.popen.pid, signal.SIGKILL)  # the publisher dies
        time.sleep(END_S - PLAYER_DIES_S)
        assert w.state() == "active"
        assert not play.alive()
        trajectory = list(w.seen.trajectory)
        reasoning = list(w.seen.reasoning)
        diagnostics = list(w.seen.diagnostics)
    assert launch.alive()

    # The control rate held from before the first fault to after the last.
    ticks = [r["wall_ns"] / 1e9 - t0 for r in trajectory if r["wall_ns"] / 1e9 - t0 >= 0.5]
    span = ticks[-1] - ticks[0]
    assert abs((len(ticks) - 1) / span - RATE_HZ) <= 0.05 * RATE_HZ, (len(ticks), span)
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    # On failure: arrival and stamp (the node's tick) around the gap, seconds after t0 — a
    # late stamp is the node's timer, a late arrival with a timely stamp the transport/watcher.
    i = gaps.index(max(gaps))
    late = [r for r in trajectory if r["wall_ns"] / 1e9 - t0 >= 0.5][max(0, i - 1) : i + 2]
    around = [(round(r["wall_ns"] / 1e9 - t0, 3), round(r["stamp_ns"] / 1e9 - t0, 3)) for r in late]
    assert max(gaps) < 0.3, (max(gaps), around)

    # Rear silent (degrade policy): plans go on, degraded, the camera is reported stale. (A
    # restamped window's stamp is the wall time its newest frame was played.)
    degraded = [
        r["record"]
        for r in reasoning
        if REAR_SILENT_S + 0.35 <= r["record"]["window"]["stamp_ns"] / 1e9 - t0 < ODOM_STOPS_S
    ]
    assert degraded and all(r["window"]["degraded_cameras"] == ["rear"] for r in degraded)
    rear = _statuses(diagnostics, REAR_SILENT_S + 1.0, ODOM_STOPS_S, t0)["blockplan: camera rear"]
    assert rear and all(s["level"] == 1 and s["message"].startswith("stale") for s in rear)

    # Odometry stopped: no new requests; once the plan is too old, the fallback, with why.
    after_odom = _statuses(diagnostics, ODOM_STOPS_S + 2.0, END_S, t0)
    odometry = after_odom["blockplan: odometry"]
    assert all(s["level"] == 1 and "old" in s["message"] for s in odometry), odometry
    loop = after_odom["blockplan: control loop"]
    assert all(s["level"] == 1 and s["message"].startswith("fallback: ") for s in loop), loop

    # The player is gone: every camera goes stale, the node still ticks (checked above).
    dead = _statuses(diagnostics, PLAYER_DIES_S + 1.0, END_S, t0)
    for name in (f"blockplan: camera {c}" for c in ("front_left", "front", "front_right")):
        assert dead[name] and all(s["level"] == 1 for s in dead[name]), dead[name]

    launch.interrupt()
    assert_clean_exit(launch.output)


def _wait_for_plan(seen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(r["record"]["accepted"] for r in seen.reasoning):
            return True
        time.sleep(0.05)
    return False
