"""The route command a router would publish (`/planning/route_command`), from the ego's
planned highway-env route rather than from its future motion (which closed loop cannot know).

The route is a list of roads (from, to); the command looks `lookahead` metres along it from
the ego's projection: a heading change above 45° is a turn, a junction road (intersection,
"ir…") on the way is `straight`, anything else `lane_follow` — the thresholds of
`blockplan.sim.labels`, so the model is asked what its training labels asked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockplan.types import DEFAULT_ROUTE_COMMAND

TURN_RAD = np.radians(45.0)
LOOKAHEAD_S = 8.0  # as the labels' route look-ahead
MIN_LOOKAHEAD_M = 20.0
SAMPLE_M = 2.0


def _closest_lane(network: Any, road: tuple, position: np.ndarray) -> Any:
    lanes = network.graph[road[0]][road[1]]
    return min(lanes, key=lambda lane: lane.distance(position))


def route_command(network: Any, route: list[tuple], position: np.ndarray, speed: float) -> str:
    """`position`: the ego's highway-env position. `route`: the ego's planned lane indices."""
    roads = [(r[0], r[1]) for r in route if r[0] in network.graph and r[1] in network.graph[r[0]]]
    if not roads:
        return DEFAULT_ROUTE_COMMAND
    dists = [_closest_lane(network, r, position).distance(position) for r in roads]
    i = int(np.argmin(dists))
    lane = _closest_lane(network, roads[i], position)
    s = float(lane.local_coordinates(position)[0])
    remaining = max(MIN_LOOKAHEAD_M, speed * LOOKAHEAD_S)
    headings = [float(lane.heading_at(s))]
    in_junction = roads[i][0].startswith("ir")
    while remaining > 0:
        s += SAMPLE_M
        remaining -= SAMPLE_M
        if s > lane.length:
            i += 1
            if i >= len(roads):
                break
            s -= lane.length
            lane = _closest_lane(network, roads[i], lane.position(lane.length, 0.0))
            in_junction |= roads[i][0].startswith("ir")
        headings.append(float(lane.heading_at(min(s, lane.length))))
    # highway-env headings grow clockwise: REP-103's yaw change is the negative.
    dyaw = -float(np.sum(np.angle(np.exp(1j * np.diff(headings))))) if len(headings) > 1 else 0.0
    if dyaw > TURN_RAD:
        return "turn_left"
    if dyaw < -TURN_RAD:
        return "turn_right"
    return "straight" if in_junction else DEFAULT_ROUTE_COMMAND
