"""`PlannerObserver`: record what a live planner node publishes, with arrival times, and
summarize it (`blockplan play --observe DIR`; the live-graph tests; docs/BENCHMARKS.md).

Subscribes to the planner's outputs (`topics.*` of the default config, under `namespace`;
`/diagnostics` stays absolute) and keeps, per message, the wall-clock arrival time and what
the checks need: trajectory header stamp, frame ids and pose count; rollout markers; the
reasoning records; the diagnostics statuses. The player reports when it published each
camera frame (`camera_published`), so the summary has the end-to-end latency from the newest
camera frame of a plan's window (its stamp t0) going out to the plan's reasoning arriving.

`write(dir)` writes `observed.json` (summary + records) and `reasoning.jsonl` (one reasoning
record per line: `blockplan replay --requests` follows these requests).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from blockplan.bags import ModuleMessages, diagnostics_from_msg, header_stamp_ns
from blockplan.config import PlannerConfig, TopicsConfig
from blockplan.ros.params import node_topic

OBSERVER_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE
)


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """{count, p50, p99, max} (None without values), rounded to 0.001."""
    if not values:
        return {"count": 0, "p50": None, "p99": None, "max": None}
    a = np.asarray(values, dtype=np.float64)
    return {
        "count": len(values),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
    }


def rate_hz(times_ns: list[int]) -> float | None:
    """Messages per second over the span of their times."""
    if len(times_ns) < 2 or times_ns[-1] == times_ns[0]:
        return None
    return round((len(times_ns) - 1) / ((times_ns[-1] - times_ns[0]) / 1e9), 4)


def _settled(wall_ns: list[int], skip_s: float = 1.0) -> list[int]:
    """Arrivals from `skip_s` after the first on: the callbacks of the first moments after
    subscribing come in a burst (discovery, executor start) that is not the publisher's."""
    return [t for t in wall_ns if t >= wall_ns[0] + skip_s * 1e9] if wall_ns else []


def _periods_ms(stamps_ns: list[int]) -> list[float]:
    return [(b - a) / 1e6 for a, b in zip(stamps_ns, stamps_ns[1:], strict=False)]


class PlannerObserver:
    """Subscriptions on `node`; thread-safe records (see the module docstring)."""

    def __init__(self, node: Node, namespace: str = "", topics: TopicsConfig | None = None) -> None:
        topics = topics or PlannerConfig().topics
        ns = ModuleMessages()
        prefix = f"/{namespace.strip('/')}/" if namespace.strip("/") else "/"
        self.topics = {
            "trajectory": prefix + node_topic(topics.trajectory),
            "rollouts": prefix + node_topic(topics.rollouts),
            "reasoning": prefix + node_topic(topics.reasoning),
            "diagnostics": topics.diagnostics,
        }
        self._lock = threading.Lock()
        self.trajectory: list[dict[str, Any]] = []
        self.rollouts: list[dict[str, Any]] = []
        self.reasoning: list[dict[str, Any]] = []
        self.diagnostics: list[dict[str, Any]] = []
        self.camera_wall_ns: dict[int, int] = {}  # stamp -> when its last frame went out
        types = {
            "trajectory": "nav_msgs/msg/Path",
            "rollouts": "visualization_msgs/msg/MarkerArray",
            "reasoning": "std_msgs/msg/String",
            "diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
        }
        callbacks = {
            "trajectory": self._on_trajectory,
            "rollouts": self._on_rollouts,
            "reasoning": self._on_reasoning,
            "diagnostics": self._on_diagnostics,
        }
        self.subscriptions = [
            node.create_subscription(
                ns.message_class(types[key]), topic, callbacks[key], OBSERVER_QOS
            )
            for key, topic in self.topics.items()
        ]

    # ------------------------------------------------------------------ callbacks

    def camera_published(self, topic: str, stamp_ns: int, wall_ns: int) -> None:
        with self._lock:
            self.camera_wall_ns[stamp_ns] = wall_ns

    def _on_trajectory(self, msg: Any) -> None:
        wall = time.time_ns()
        stamp = header_stamp_ns(msg)
        record = {
            "wall_ns": wall,
            "stamp_ns": stamp,
            "frame_id": msg.header.frame_id,
            "num_poses": len(msg.poses),
            "pose_frame_ids": sorted({p.header.frame_id for p in msg.poses}),
            "pose_t_s": [round((header_stamp_ns(p) - stamp) / 1e9, 6) for p in msg.poses],
            "end_xy": [msg.poses[-1].pose.position.x, msg.poses[-1].pose.position.y]
            if msg.poses
            else None,
        }
        with self._lock:
            self.trajectory.append(record)

    def _on_rollouts(self, msg: Any) -> None:
        markers = list(msg.markers)
        record = {
            "wall_ns": time.time_ns(),
            "num_markers": len(markers),
            "stamps_ns": sorted({header_stamp_ns(m) for m in markers}),
            "frame_ids": sorted({m.header.frame_id for m in markers}),
            "types": sorted({int(m.type) for m in markers}),
            "actions": sorted({int(m.action) for m in markers}),
            "num_points": [len(m.points) for m in markers],
        }
        with self._lock:
            self.rollouts.append(record)

    def _on_reasoning(self, msg: Any) -> None:
        wall = time.time_ns()
        with self._lock:
            last_tick = self.trajectory[-1]["stamp_ns"] if self.trajectory else None
            self.reasoning.append(
                {"wall_ns": wall, "tick_stamp_ns": last_tick, "record": json.loads(msg.data)}
            )

    def _on_diagnostics(self, msg: Any) -> None:
        record = {
            "wall_ns": time.time_ns(),
            "stamp_ns": header_stamp_ns(msg),
            "statuses": diagnostics_from_msg(msg),
        }
        with self._lock:
            self.diagnostics.append(record)

    # ------------------------------------------------------------------ summary

    def summary(self) -> dict[str, Any]:
        with self._lock:
            trajectory, reasoning = list(self.trajectory), list(self.reasoning)
            diagnostics, cameras = list(self.diagnostics), dict(self.camera_wall_ns)
        traj_wall = _settled([r["wall_ns"] for r in trajectory])
        traj_stamps = [r["stamp_ns"] for r in trajectory]
        e2e, node_clock = [], []
        for r in reasoning:
            rec = r["record"]
            if not rec.get("accepted", True):
                continue
            stamp = int(rec["stamp_ns"])
            if stamp in cameras:
                e2e.append((r["wall_ns"] - cameras[stamp]) / 1e6)
            if r["tick_stamp_ns"] is not None:
                node_clock.append((r["tick_stamp_ns"] - stamp) / 1e6)
        cpu = [
            s["values"]
            for d in diagnostics
            for s in d["statuses"]
            if s["name"] == "blockplan: node" and float(s["values"].get("window_s", 0)) > 0.5
        ]

        def cpu_stat(key: str) -> dict[str, Any]:
            return percentiles([float(v[key]) for v in cpu if v.get(key) not in (None, "n/a")])

        return {
            "topics": self.topics,
            "trajectory": {
                "count": len(trajectory),
                "rate_hz": rate_hz(traj_stamps),  # node clock (sim time under use_sim_time)
                "stamp_period_ms": percentiles(_periods_ms(traj_stamps)),
                "arrival_rate_hz": rate_hz(traj_wall),  # wall clock, after the first second
                "arrival_period_ms": percentiles(_periods_ms(traj_wall)),
                "frame_ids": sorted({r["frame_id"] for r in trajectory}),
            },
            "plans": {
                "count": len(reasoning),
                "accepted": sum(bool(r["record"].get("accepted", True)) for r in reasoning),
                "rejected": sum(not r["record"].get("accepted", True) for r in reasoning),
                "e2e_latency_ms": percentiles(e2e),
                "tick_minus_stamp_ms": percentiles(node_clock),
            },
            "diagnostics": {
                "count": len(diagnostics),
                "rate_hz": rate_hz([d["stamp_ns"] for d in diagnostics]),
                "arrival_rate_hz": rate_hz(_settled([d["wall_ns"] for d in diagnostics])),
                "stamp_period_ms": percentiles(_periods_ms([d["stamp_ns"] for d in diagnostics])),
            },
            "node_cpu_percent": {
                "total": cpu_stat("cpu_percent"),
                "inference": cpu_stat("inference_cpu_percent"),
                "besides_inference": cpu_stat("other_cpu_percent"),
                "besides_inference_ms_per_tick": cpu_stat("other_cpu_ms_per_tick"),
            },
        }

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            doc = {
                "summary": None,
                "trajectory": list(self.trajectory),
                "rollouts": list(self.rollouts),
                "reasoning": list(self.reasoning),
                "diagnostics": list(self.diagnostics),
                "camera_published_ns": {str(k): v for k, v in self.camera_wall_ns.items()},
            }
        doc["summary"] = self.summary()
        path = out_dir / "observed.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        lines = [json.dumps(r["record"], separators=(",", ":")) for r in doc["reasoning"]]
        (out_dir / "reasoning.jsonl").write_text("".join(line + "\n" for line in lines))
        return path
