"""The route ahead: points along the planned route at fixed distances from the ego, in the
ego frame at t0 — what the planner reads of a router's path (`/planning/route`,
nav_msgs/Path in odom; docs/ALGORITHMS.md §3.8).

A router (or a map module on a lanelet route) publishes the centre line of the lanes the
vehicle is to drive, from a little behind it to well ahead. The planner does not need the
whole line: it reads where the route is `ROUTE_AHEAD_M` metres along it from the ego's
projection. The same function turns a recorded path into the training sample's points and a
received path into the runtime's, so training and serving read the same numbers.
"""

from __future__ import annotations

import numpy as np

from blockplan.trajectory.frames import Pose2D
from blockplan.types import ROUTE_AHEAD_M

__all__ = ["MAX_ROUTE_DISTANCE_M", "ROUTE_AHEAD_M", "route_ahead"]
# A path farther than this from the ego at its closest point is not the ego's route (an
# old route, another vehicle's, a wrong frame): it is not read.
MAX_ROUTE_DISTANCE_M = 10.0


def route_ahead(path: np.ndarray, pose: Pose2D) -> np.ndarray | None:
    """(P, 2) route polyline in odom and the ego's odom pose at t0 → (len(ROUTE_AHEAD_M), 2)
    points in the ego frame at t0, or None when the path cannot say where the route goes:
    fewer than two distinct points, a non-finite one, or the ego farther than
    `MAX_ROUTE_DISTANCE_M` from it. Beyond the path's end the points continue along its
    last segment (a route that ends goes on straight)."""
    xy = np.asarray(path, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2 or not np.isfinite(xy).all():
        return None
    keep = np.concatenate([[True], np.linalg.norm(np.diff(xy, axis=0), axis=1) > 1e-6])
    xy = pose.inverse().transform_points(xy[keep])  # (P', 2) in the ego frame
    if len(xy) < 2:
        return None
    seg = np.diff(xy, axis=0)  # (P'-1, 2)
    length = np.linalg.norm(seg, axis=1)  # (P'-1,)
    # The ego (the origin) projected on every segment; the nearest projection wins.
    u = np.clip(-np.einsum("ij,ij->i", xy[:-1], seg) / length**2, 0.0, 1.0)  # (P'-1,)
    foot = xy[:-1] + u[:, None] * seg
    dist = np.linalg.norm(foot, axis=1)
    k = int(np.argmin(dist))
    if dist[k] > MAX_ROUTE_DISTANCE_M:
        return None
    arc = np.concatenate([[0.0], np.cumsum(length)])  # (P',)
    at = arc[k] + u[k] * length[k] + np.asarray(ROUTE_AHEAD_M)  # (A,)
    points = np.stack([np.interp(at, arc, xy[:, 0]), np.interp(at, arc, xy[:, 1])], axis=-1)
    beyond = at > arc[-1]
    if beyond.any():
        direction = seg[-1] / length[-1]
        points[beyond] = xy[-1] + (at[beyond] - arc[-1])[:, None] * direction
    return points
