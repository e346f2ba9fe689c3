"""The route a router would publish (`/planning/route`): the centre line of the lanes the
ego is to drive, from its lane now along its planned highway-env route, in REP-103.

The line starts `PATH_BEHIND_M` behind the ego's station on its current lane (the one
highway-env assigns it, as the lane pose) and runs `PATH_AHEAD_M` ahead, a point every
`PATH_STEP_M` of lane. Which lanes it takes:

- at a lane's end, the route's next road, in the lane that starts nearest the end of the one
  before (a lane-level route keeps the lane it is in);
- where the route says nothing (no route, or a road off it), the only road that follows;
  where several follow, the line ends there;
- where the ego is on a road off the route that leaves the same node as one of the route's
  (a roundabout's ring beside its exit), the route's road.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PATH_BEHIND_M = 10.0
PATH_AHEAD_M = 120.0
PATH_STEP_M = 2.0


def _next_road(network: Any, road: tuple[str, str], route: list[tuple]) -> tuple[str, str] | None:
    roads = [(r[0], r[1]) for r in route]
    after = roads[roads.index(road) + 1 :] if road in roads else roads
    for a, b in after:
        if a == road[1] and a in network.graph and b in network.graph[a]:
            return (a, b)
    successors = list(network.graph.get(road[1], {}))
    return (road[1], successors[0]) if len(successors) == 1 else None


def route_path(
    network: Any, route: list[tuple] | None, lane_index: tuple, position: np.ndarray
) -> np.ndarray:
    """(P, 2) REP-103 points of the route ahead of a vehicle at highway-env `position` on
    lane `lane_index`, following `route` (highway-env's list of lane indices; may be
    None or already partly consumed)."""
    route = list(route or [])
    position = np.asarray(position, dtype=np.float64)
    index = tuple(lane_index)
    # Where two roads leave one node (a roundabout's exit beside its ring) the simulator may
    # put the ego on the one the route does not take: the route's road from that node wins.
    roads = [(r[0], r[1]) for r in route if r[0] in network.graph and r[1] in network.graph[r[0]]]
    if (index[0], index[1]) not in roads:
        for a, b in roads:
            if a == index[0]:
                lanes = network.graph[a][b]
                k = min(range(len(lanes)), key=lambda j: lanes[j].distance(position))
                index = (a, b, k)
                break
    lane = network.get_lane(index)
    s = float(lane.local_coordinates(position)[0]) - PATH_BEHIND_M
    points, ended = [], False
    for _ in range(int(round((PATH_BEHIND_M + PATH_AHEAD_M) / PATH_STEP_M)) + 1):
        while s > lane.length:
            road = _next_road(network, (index[0], index[1]), route)
            if road is None:
                ended = True  # the line ends here
                break
            end = lane.position(lane.length, 0.0)
            lanes = network.graph[road[0]][road[1]]
            k = min(
                range(len(lanes)), key=lambda j: np.linalg.norm(lanes[j].position(0.0, 0.0) - end)
            )
            s -= lane.length
            index, lane = (road[0], road[1], k), lanes[k]
        if ended:
            break
        x, y = lane.position(s, 0.0)
        points.append((float(x), -float(y)))
        s += PATH_STEP_M
    return np.asarray(points, dtype=np.float64)
