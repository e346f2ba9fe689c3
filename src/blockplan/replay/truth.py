"""Ground truth from the recorded odometry: the ego's future path in the ego frame at t0.

The bag's odometry is the path the vehicle really drove. For a plan made at t0 (ego pose
`pose` in odometry), the ground truth is the recorded position at t0 + t for the plan's sample
times, expressed in the ego frame at t0. It exists only where the recording covers the whole
horizon and has no gap longer than `max_gap_s`.
"""

from __future__ import annotations

import numpy as np

from blockplan.trajectory import Pose2D
from blockplan.types import EgoState, seconds_to_ns


class RecordedPath:
    # `missing_reason` for a plan whose horizon runs past the last recorded sample
    ENDS = "the recording ends within its horizon"

    def __init__(self, states: list[EgoState], max_gap_s: float = 0.5) -> None:
        good = [s for s in states if np.isfinite([s.x, s.y, s.yaw]).all()]
        good.sort(key=lambda s: s.stamp_ns)
        self.stamps = np.array([s.stamp_ns for s in good], dtype=np.int64)
        self.xy = np.array([[s.x, s.y] for s in good], dtype=np.float64).reshape(-1, 2)
        self.max_gap_ns = seconds_to_ns(max_gap_s)

    def __len__(self) -> int:
        return len(self.stamps)

    def future(self, t0_ns: int, pose: Pose2D, times_s: np.ndarray) -> np.ndarray | None:
        """(P, 2) recorded positions at t0 + times_s in the frame of `pose`, or None."""
        if len(self.stamps) < 2:
            return None
        query = t0_ns + np.round(np.asarray(times_s) * 1e9).astype(np.int64)  # (P,)
        if t0_ns < self.stamps[0] or query[-1] > self.stamps[-1]:
            return None
        lo = np.searchsorted(self.stamps, t0_ns, side="right") - 1
        hi = np.searchsorted(self.stamps, query[-1], side="left")
        if np.any(np.diff(self.stamps[lo : hi + 1]) > self.max_gap_ns):
            return None
        rel = (query - self.stamps[0]).astype(np.float64)  # interpolate in float from the start
        return self._interpolate(rel, pose)

    def missing_reason(self, t0_ns: int, pose: Pose2D, times_s: np.ndarray) -> str:
        """Why `future` is None for this plan (call it only then)."""
        if len(self.stamps) < 2:
            return "no recorded odometry"
        query_end = t0_ns + int(round(float(np.asarray(times_s)[-1]) * 1e9))
        if t0_ns < self.stamps[0]:
            return "before the recorded odometry starts"
        if query_end > self.stamps[-1]:
            return self.ENDS
        return f"a gap of more than {self.max_gap_ns / 1e9:g} s in the recorded odometry"

    def _interpolate(self, rel: np.ndarray, pose: Pose2D) -> np.ndarray:
        base = (self.stamps - self.stamps[0]).astype(np.float64)
        x = np.interp(rel, base, self.xy[:, 0])
        y = np.interp(rel, base, self.xy[:, 1])
        return pose.inverse().transform_points(np.stack([x, y], axis=-1))


class GroundTruthPaths:
    """Ground truth recorded as nav_msgs/Path messages in the ego frame at t0, one per t0
    (the simulator's /ground_truth/future_path). Looked up by the plan's stamp."""

    def __init__(self, paths: dict[int, tuple[np.ndarray, np.ndarray]], tolerance_ns: int = 0):
        self.paths = paths  # stamp_ns -> (t (P,), xy (P, 2))
        self.tolerance_ns = tolerance_ns
        self._stamps = np.array(sorted(paths), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def future(self, t0_ns: int, pose: Pose2D, times_s: np.ndarray) -> np.ndarray | None:
        """(P, 2) ground-truth positions at `times_s` (ego frame at t0; `pose` is unused: the
        recorded paths are already in that frame), or None without a path at t0."""
        if not len(self._stamps):
            return None
        near = self._nearest(t0_ns)
        if near is None:
            return None
        t, xy = self.paths[near]
        times_s = np.asarray(times_s, dtype=np.float64)
        if len(t) < 2 or times_s[0] < t[0] - 1e-9 or times_s[-1] > t[-1] + 1e-9:
            return None
        return np.stack([np.interp(times_s, t, xy[:, 0]), np.interp(times_s, t, xy[:, 1])], -1)

    def missing_reason(self, t0_ns: int, pose: Pose2D, times_s: np.ndarray) -> str:
        """Why `future` is None for this plan (call it only then)."""
        if self._nearest(t0_ns) is None:
            return "no recorded future path at its stamp"
        return "the recorded future path is shorter than the plan"

    def _nearest(self, t0_ns: int) -> int | None:
        if not len(self._stamps):
            return None
        i = int(np.clip(np.searchsorted(self._stamps, t0_ns), 0, len(self._stamps) - 1))
        near = min((i, max(i - 1, 0)), key=lambda k: abs(int(self._stamps[k]) - t0_ns))
        if abs(int(self._stamps[near]) - t0_ns) > self.tolerance_ns:
            return None
        return int(self._stamps[near])
