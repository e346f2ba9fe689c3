"""Per-episode closed-loop measurements and their aggregate per policy.

* collision: highway-env flagged the ego crashed (the episode ends there);
* lane departure: the ego's centre left every lane of the road network (the episode ends);
* progress: the length of the path the ego drove (m);
* comfort: mean |jerk| of the ego's longitudinal motion, d²v/dt² from its speed sampled at
  the control rate (m/s³), the same sampling for every policy;
* lane keeping: |lateral offset| of the ego's centre from the centre line of its closest
  lane, at the control rate: mean and maximum (m). A lane change passes through ~half a
  lane width, so compare a policy with the expert on the same seeds; a slow drift that ends
  in a departure shows up here first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class EpisodeResult:
    policy: str
    scenario: str
    seed: int
    simulated_s: float
    collided: bool
    departed: bool
    progress_m: float
    mean_abs_jerk: float
    counters: dict[str, int] = field(default_factory=dict)
    mean_abs_lane_offset_m: float = 0.0
    max_abs_lane_offset_m: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Trace:
    """Ego samples at the control rate: t (s), x, y (m, odom), speed (m/s), and the
    |lateral offset| from its closest lane's centre line (m)."""

    t: list[float] = field(default_factory=list)
    xy: list[tuple[float, float]] = field(default_factory=list)
    speed: list[float] = field(default_factory=list)
    lane_offset: list[float] = field(default_factory=list)

    def add(self, t: float, x: float, y: float, speed: float, lane_offset: float = 0.0) -> None:
        self.t.append(t)
        self.xy.append((x, y))
        self.speed.append(speed)
        self.lane_offset.append(abs(lane_offset))

    def lane_offset_m(self) -> tuple[float, float]:
        """(mean, max) |lateral offset| over the samples (0, 0 without any)."""
        if not self.lane_offset:
            return 0.0, 0.0
        return float(np.mean(self.lane_offset)), float(np.max(self.lane_offset))

    def progress_m(self) -> float:
        if len(self.xy) < 2:
            return 0.0
        return float(np.linalg.norm(np.diff(np.asarray(self.xy), axis=0), axis=1).sum())

    def mean_abs_jerk(self) -> float:
        """Mean |d²v/dt²| over the samples (0 with fewer than 3)."""
        if len(self.speed) < 3:
            return 0.0
        t, v = np.asarray(self.t), np.asarray(self.speed)  # (S,), (S,)
        a = np.diff(v) / np.diff(t)  # (S-1,) at the interval midpoints
        mid = 0.5 * (t[1:] + t[:-1])  # (S-1,)
        jerk = np.diff(a) / np.diff(mid)  # (S-2,)
        return float(np.abs(jerk).mean())


def aggregate(results: list[EpisodeResult]) -> dict:
    """The per-policy summary the JSON reports."""
    if not results:
        return {
            "episodes": 0,
            "collision_rate": None,
            "progress_m": None,
            "lane_departure_rate": None,
            "mean_abs_jerk": None,
            "mean_abs_lane_offset_m": None,
            "max_abs_lane_offset_m": None,
        }
    counters: dict[str, int] = {}
    for r in results:
        for key, value in r.counters.items():
            counters[key] = counters.get(key, 0) + int(value)
    return {
        "episodes": len(results),
        "collision_rate": float(np.mean([r.collided for r in results])),
        "progress_m": float(np.mean([r.progress_m for r in results])),
        "lane_departure_rate": float(np.mean([r.departed for r in results])),
        "mean_abs_jerk": float(np.mean([r.mean_abs_jerk for r in results])),
        "mean_abs_lane_offset_m": float(np.mean([r.mean_abs_lane_offset_m for r in results])),
        "max_abs_lane_offset_m": float(np.max([r.max_abs_lane_offset_m for r in results])),
        "simulated_s": float(np.sum([r.simulated_s for r in results])),
        "counters": counters,
    }
