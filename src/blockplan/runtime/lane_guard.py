"""The lane guard: which rollouts keep out of the lanes beside that they must not enter.

A planner that averages N rollouts can average a lane change into a car driving alongside,
and a greedy one can plan a change out of the outermost lane. The map and the tracker say
what is beside the ego (/perception/lanes_beside, bags/beside.py); `guard_keeps` checks each
rollout against that report (`LaneGuardConfig`, docs/RUNTIME.md "The lane guard"):

* a rollout *moves into* a side when its lateral offset from the centre of the ego's lane
  passes `change_m` towards it at any point of the horizon; the offset is taken in the lane
  frame at t0, from the lane pose (offset, heading error) when known, else the ego frame;
* a side is *closed* when a car is in the lane line on that side nearer than
  `clear_ahead_m` ahead or `clear_behind_m` behind (the tracker), or when the map says there
  is no lane there;
* both are checked on a straight road only (the ego's yaw changed by at most
  `straight_yaw_rad` over the last second, and the rollout turns by at most
  `max_turn_rad`): in a curve the lane lines beside are not where a straight road has them,
  and a lane count says nothing of the curve.

Unknown parts of the report (NaN) close nothing: without a report the guard keeps every
rollout.
"""

from __future__ import annotations

import math

import numpy as np

from blockplan.config import LaneGuardConfig
from blockplan.types import Observation, Trajectory

STRAIGHT_WINDOW_NS = 1_000_000_000  # the ego's yaw change is taken over the last second


def closed_sides(beside: np.ndarray, guard: LaneGuardConfig) -> tuple[tuple[bool, bool], ...]:
    """Per side (left, right): (closed by a car, no lane there) from a (2, 5) report."""
    out = []
    for lanes, gap_ahead, _, gap_behind, _ in np.asarray(beside, dtype=np.float64):
        car = bool(gap_ahead < guard.clear_ahead_m or gap_behind < guard.clear_behind_m)
        out.append((car, bool(lanes == 0)))  # NaN compares False: unknown closes nothing
    return tuple(out)


def yaw_change_1s(observation: Observation) -> float:
    """|yaw(t0) - yaw(t0 - 1 s)| from the observation's ego history (the state nearest 1 s
    back); inf when the history is shorter than that."""
    history = observation.ego_history
    if not history:
        return math.inf
    now = history[-1]
    past = min(history, key=lambda s: abs(s.stamp_ns - (now.stamp_ns - STRAIGHT_WINDOW_NS)))
    if now.stamp_ns - past.stamp_ns < STRAIGHT_WINDOW_NS // 2:
        return math.inf
    return abs(math.remainder(now.yaw - past.yaw, math.tau))


def moves_into(traj: Trajectory, observation: Observation, change_m: float) -> tuple[bool, bool]:
    """(left, right): whether the path's lateral offset from the centre of the ego's lane (in
    the lane frame at t0, from the observation's lane pose when known) passes `change_m`
    towards that side at any point."""
    offset, heading = 0.0, 0.0
    if observation.lane_pose is not None:
        offset, heading = (float(v) for v in observation.lane_pose)
    x, y = np.asarray(traj.x), np.asarray(traj.y)
    lateral = offset + x * math.sin(heading) + y * math.cos(heading)
    return bool(lateral.max() > change_m), bool(-lateral.min() > change_m)


def guard_keeps(
    rollouts: list[Trajectory], observation: Observation | None, guard: LaneGuardConfig
) -> tuple[np.ndarray, str]:
    """(N,) bool: the rollouts the guard keeps, and why the others were dropped ("" when
    all are kept)."""
    keep = np.ones(len(rollouts), dtype=bool)
    if not guard.enabled or observation is None or observation.beside is None:
        return keep, ""
    closed = closed_sides(np.asarray(observation.beside), guard)
    straight_road = yaw_change_1s(observation) <= guard.straight_yaw_rad
    reasons = []
    for i, traj in enumerate(rollouts):
        moves = moves_into(traj, observation, guard.change_m)
        turn = float(np.abs(np.asarray(traj.yaw) - traj.yaw[0]).max()) if len(traj.yaw) else 0.0
        if not straight_road or turn > guard.max_turn_rad:
            continue  # a curve: the lines beside are not where a straight road has them
        for side, name in enumerate(("left", "right")):
            if not moves[side]:
                continue
            car, no_lane = closed[side]
            if car:
                keep[i] = False
                reasons.append(f"rollout {i} moves {name} into a car beside")
            elif no_lane:
                keep[i] = False
                reasons.append(f"rollout {i} moves {name} where the map has no lane")
    return keep, "; ".join(reasons)
