"""Collision check of a plan against other agents' true future boxes (docs/ALGORITHMS.md §9).

The shards hold the ego's labels, not the other agents, so the test episodes are simulated
again from their seeds (the simulator is deterministic per seed; `replay_episode` checks the
ego's recorded future against the shard and refuses a mismatch). The ego box (its true length
and width) is swept along the plan at 4 Hz, heading along the plan, and tested for overlap
(separating axis theorem) with every present agent's box at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blockplan.types import Trajectory

EGO_LENGTH_M, EGO_WIDTH_M = 5.0, 2.0  # highway-env's vehicle size


class ReplayMismatch(RuntimeError):
    """A re-simulated episode does not reproduce the shard's ego future."""


@dataclass(frozen=True)
class AgentFutures:
    """One episode's other agents: boxes (S, M, 4) x, y, yaw, speed in odom, present (S, M),
    sizes (M, 2) length, width; ego (S, 3) x, y, yaw; t (S,)."""

    t: np.ndarray
    ego: np.ndarray
    boxes: np.ndarray
    present: np.ndarray
    sizes: np.ndarray
    dt: float

    def index_at(self, t: float) -> int:
        return int(np.clip(round(t / self.dt), 0, len(self.t) - 1))


def replay_episode(scenario: str, seed: int, duration_s: float) -> AgentFutures:
    from blockplan.sim.episode import EGO_X, EGO_Y, EGO_YAW, run_episode
    from blockplan.sim.scenarios import get_scenario

    log = run_episode(get_scenario(scenario), seed, duration_s)
    sizes = np.array([[b.length, b.width] for b in log.box_static]).reshape(-1, 2)
    return AgentFutures(
        t=log.t,
        ego=log.ego[:, [EGO_X, EGO_Y, EGO_YAW]],
        boxes=log.boxes,
        present=log.present,
        sizes=sizes,
        dt=log.dt,
    )


def _corners(x, y, yaw, length, width) -> np.ndarray:
    """(..., 4, 2) corners of boxes centred at (x, y) with heading yaw."""
    c, s = np.cos(yaw), np.sin(yaw)
    dx = np.array([1, 1, -1, -1]) * 0.5
    dy = np.array([1, -1, -1, 1]) * 0.5
    lx = np.multiply.outer(length, dx)  # (..., 4)
    ly = np.multiply.outer(width, dy)
    cx = np.asarray(x)[..., None] + c[..., None] * lx - s[..., None] * ly
    cy = np.asarray(y)[..., None] + s[..., None] * lx + c[..., None] * ly
    return np.stack([cx, cy], axis=-1)


def boxes_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Two (4, 2) convex quadrilaterals overlap (separating axis theorem)."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        for ex, ey in edges:
            axis = np.array([-ey, ex])
            pa, pb = a @ axis, b @ axis
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def plan_collides(plan: Trajectory, t0: float, world: AgentFutures) -> bool:
    """Whether the ego box swept along `plan` (ego frame at t0) hits an agent's true box."""
    i0 = world.index_at(t0)
    x0, y0, yaw0 = world.ego[i0]
    c, s = np.cos(yaw0), np.sin(yaw0)
    for k in range(len(plan.t)):
        px = x0 + c * plan.x[k] - s * plan.y[k]
        py = y0 + s * plan.x[k] + c * plan.y[k]
        ego = _corners(px, py, yaw0 + plan.yaw[k], EGO_LENGTH_M, EGO_WIDTH_M)
        i = world.index_at(t0 + plan.t[k])
        for j in np.flatnonzero(world.present[i]):
            bx, by, byaw, _ = world.boxes[i, j]
            if np.hypot(bx - px, by - py) > 12.0:
                continue
            other = _corners(bx, by, byaw, world.sizes[j, 0], world.sizes[j, 1])
            if boxes_overlap(ego, other):
                return True
    return False


def check_replay(world: AgentFutures, t0: float, future_xy: np.ndarray, tol_m: float = 0.2):
    """Raise `ReplayMismatch` unless the replayed ego future matches the shard's (20, 2)."""
    i0 = world.index_at(t0)
    x0, y0, yaw0 = world.ego[i0]
    c, s = np.cos(yaw0), np.sin(yaw0)
    idx = [world.index_at(t0 + 0.25 * (k + 1)) for k in range(len(future_xy))]
    d = world.ego[idx, :2] - [x0, y0]
    local = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], axis=-1)
    err = float(np.abs(local - future_xy).max())
    if err > tol_m:
        raise ReplayMismatch(f"replayed ego future differs from the shard by {err:.2f} m")
