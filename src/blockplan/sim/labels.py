"""Driving-schema labels from a recorded episode: what the expert actually did next.

At a label time t0 (which needs 5 s of recorded future):
* waypoints: the expert's positions at t0 + 1..5 s in the ego frame at t0 (REP-103);
* future: the 20-point 4 Hz future (t0 + 0.25 .. 5.0 s) for evaluation, with yaw and speed;
* history: ego states at t0 - history_s .. t0 (oldest first), what the prompt needs;
* meta behaviour from the future motion: longitudinal from the speed change over 3 s (or a
  stop), lateral from the heading change (turns) and the change of the left-positive offset
  from lane 0 of the road (lane changes), `straight` through a junction;
* critical objects from the world state: nearby vehicles, conflicting vehicles (whose true
  future path meets the ego's within 1.5 s although they are not simply the vehicle ahead in
  the ego's lane: merges, cut-ins, crossing traffic), road hazards (static obstacles ahead).
  Categories the simulator cannot produce (pedestrians, weather, ...) are always "no".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from blockplan.sim.episode import (
    BOX_SPEED,
    BOX_X,
    BOX_Y,
    BOX_YAW,
    EGO_ACCEL,
    EGO_LAT,
    EGO_SPEED,
    EGO_X,
    EGO_Y,
    EGO_YAW,
    EpisodeLog,
)
from blockplan.sim.explain import Situation, explain
from blockplan.sim.world import KIND_OBSTACLE, KIND_VEHICLE, wrap_angle
from blockplan.trajectory.frames import Pose2D
from blockplan.trajectory.route import ROUTE_AHEAD_M, route_ahead
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    DEFAULT_ROUTE_COMMAND,
    NUM_WAYPOINTS,
    WAYPOINT_PERIOD_S,
    DrivingAnswer,
    EgoState,
    Lateral,
    Longitudinal,
    seconds_to_ns,
)

HORIZON_S = NUM_WAYPOINTS * WAYPOINT_PERIOD_S  # 5 s
FUTURE_DT_S = 0.25  # the 20-point 4 Hz evaluation future
LONGITUDINAL_WINDOW_S = 3.0
SPEED_CHANGE_MPS = 1.0  # |dv| over the window that counts as accelerate / decelerate
STOP_SPEED_MPS = 0.5
TURN_YAW_RAD = np.radians(35.0)
LANE_CHANGE_M = 2.0  # half a lane width
ROUTE_LOOKAHEAD_S = 8.0
NEARBY_AHEAD_M, NEARBY_BEHIND_M, NEARBY_SIDE_M, NEARBY_RADIUS_M = 40.0, 10.0, 6.0, 15.0
CONFLICT_WINDOW_S, CONFLICT_DIST_M, CONFLICT_DT_S = 4.0, 3.0, 1.5
SAME_LANE_M, SAME_HEADING_RAD = 2.0, np.radians(20.0)
NEXT_LANE_M = 6.0  # |dy| from SAME_LANE_M up to this: the lane line beside the ego's (4 m lanes)
HAZARD_AHEAD_M = 60.0


class LabelError(ValueError):
    """A label was requested at a time the log cannot serve (no 5 s of future)."""


@dataclass(frozen=True)
class SampleLabel:
    """Ground truth at t0. future_xy: (20, 2) ego frame at t0; future_t, future_yaw,
    future_speed: (20,). history: oldest -> newest, the last state is at t0."""

    stamp_ns: int
    t0: float
    answer: DrivingAnswer
    future_t: np.ndarray
    future_xy: np.ndarray
    future_yaw: np.ndarray
    future_speed: np.ndarray
    history: tuple[EgoState, ...]
    route_command: str
    facts: dict[str, float | str] = field(default_factory=dict)


def to_ego_frame(xy: np.ndarray, x0: float, y0: float, yaw0: float) -> np.ndarray:
    """(..., 2) odom points -> the ego frame (x forward, y left) at pose (x0, y0, yaw0)."""
    c, s = np.cos(yaw0), np.sin(yaw0)
    d = np.asarray(xy) - [x0, y0]
    return np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], axis=-1)


def in_lane_ahead(dx: float, dy: float, heading_diff: float) -> bool:
    """Whether a vehicle at (dx, dy) in the ego frame, heading `heading_diff` (rad, absolute)
    off the ego's, is ahead in the ego's lane line: what the labels call the lead."""
    return dx > 0 and abs(dy) < SAME_LANE_M and heading_diff < SAME_HEADING_RAD


def lead_vehicle(x0: float, y0: float, yaw0: float, vehicles: np.ndarray) -> tuple[float, float]:
    """The car ahead in the ego's lane: (gap m, its speed m/s) of the nearest vehicle ahead
    in the lane line (centre to centre, along the ego's heading), or (inf, NaN) when none.
    `vehicles`: (M, 4) [x, y, yaw, speed] in odom. The labels' `lead_gap_m`, the simulated
    bags' /perception/lead_vehicle and the closed loop's tracker all come from here."""
    best = (np.inf, np.nan)
    for x, y, yaw, speed in np.asarray(vehicles, dtype=np.float64).reshape(-1, 4):
        dx, dy = to_ego_frame(np.array([x, y]), x0, y0, yaw0)
        heading_diff = abs(float(wrap_angle(yaw - yaw0)))
        if in_lane_ahead(float(dx), float(dy), heading_diff) and dx < best[0]:
            best = (float(dx), float(speed))
    return best


def beside_vehicles(x0: float, y0: float, yaw0: float, vehicles: np.ndarray) -> np.ndarray:
    """The nearest vehicles in the lane lines beside the ego's, as a tracker reports them:
    (2, 4) rows for the left and the right line, each [gap ahead m, that car's speed m/s,
    gap behind m, that car's speed m/s]; a gap is infinite (and its speed NaN) when no car
    is there. A line beside is |dy| from SAME_LANE_M to NEXT_LANE_M in the ego frame, heading
    the ego's way; gaps are centre to centre along the ego's heading, so a car alongside
    has a gap near 0 (ahead when its centre is ahead). `vehicles`: (M, 4) [x, y, yaw,
    speed] in odom. The data sets, the simulated bags and the closed loop take it from here."""
    out = np.tile([np.inf, np.nan, np.inf, np.nan], (2, 1))
    for x, y, yaw, speed in np.asarray(vehicles, dtype=np.float64).reshape(-1, 4):
        dx, dy = (float(v) for v in to_ego_frame(np.array([x, y]), x0, y0, yaw0))
        if not SAME_LANE_M <= abs(dy) < NEXT_LANE_M:
            continue
        if abs(float(wrap_angle(yaw - yaw0))) >= SAME_HEADING_RAD:
            continue
        side, col = (0 if dy > 0 else 1), (0 if dx >= 0 else 2)
        if abs(dx) < out[side, col]:
            out[side, col : col + 2] = (abs(dx), speed)
    return out


def _log_vehicles(log: EpisodeLog, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(ego row, (M, 4) [x, y, yaw, speed] of the vehicles present) at step `i`."""
    rows = [
        log.boxes[i, j][[BOX_X, BOX_Y, BOX_YAW, BOX_SPEED]]
        for j in np.flatnonzero(log.present[i])
        if log.box_static[j].kind == KIND_VEHICLE
    ]
    return log.ego[i], np.reshape(rows, (-1, 4))


def log_lead(log: EpisodeLog, i: int) -> tuple[float, float]:
    """`lead_vehicle` at step `i` of a recorded episode."""
    e, vehicles = _log_vehicles(log, i)
    return lead_vehicle(e[EGO_X], e[EGO_Y], e[EGO_YAW], vehicles)


def log_beside(log: EpisodeLog, i: int) -> np.ndarray:
    """`beside_vehicles` at step `i` of a recorded episode."""
    e, vehicles = _log_vehicles(log, i)
    return beside_vehicles(e[EGO_X], e[EGO_Y], e[EGO_YAW], vehicles)


def log_lanes_beside(log: EpisodeLog, i: int) -> np.ndarray:
    """(2, 5) the lanes beside at step `i` as the planner reads them (bags/beside.py): per
    side the map's lane count (`RoadMap.lanes_beside`), then `log_beside`'s cars."""
    lanes = np.asarray(log.road.lanes_beside(log.ego_lane[i]), dtype=np.float64)
    return np.concatenate([lanes[:, None], log_beside(log, i)], axis=1)


def log_route_ahead(log: EpisodeLog, i: int) -> np.ndarray:
    """(A, 2) the route ahead at step `i` as the planner reads it (`route_ahead` of the
    route path recorded then, in the ego frame); NaN where the path says nothing."""
    e = log.ego[i]
    points = route_ahead(log.route_path[i], Pose2D(e[EGO_X], e[EGO_Y], e[EGO_YAW]))
    return np.full((len(ROUTE_AHEAD_M), 2), np.nan) if points is None else points


def _interp_ego(log: EpisodeLog, t: np.ndarray, col: int) -> np.ndarray:
    return np.interp(t, log.t, log.ego[:, col])


def label_times(log: EpisodeLog, period_s: float, start_s: float = 0.0) -> np.ndarray:
    """Times with a full 5 s of recorded future, every `period_s`."""
    last = log.duration - HORIZON_S + 1e-9
    return np.arange(start_s, last, period_s) if last >= start_s else np.zeros(0)


def ego_state(log: EpisodeLog, i: int) -> EgoState:
    """The ego's state at step i as odometry reports it. The yaw rate is the backward
    difference over the last step (the first step: the forward one), as a causal odometry
    and the closed loop (`PlannerDriver`) have it: a central difference would let the step
    after i leak into a sample's history (a takeover in closedloop/dagger.py starts there)."""
    e = log.ego[i]
    j0, j1 = (i - 1, i) if i > 0 else (0, min(1, log.num_steps - 1))
    yaw_rate = (log.ego[j1, EGO_YAW] - log.ego[j0, EGO_YAW]) / max((j1 - j0) * log.dt, 1e-9)
    return EgoState(
        stamp_ns=seconds_to_ns(float(log.t[i])),
        x=float(e[EGO_X]),
        y=float(e[EGO_Y]),
        yaw=float(wrap_angle(e[EGO_YAW])),
        v_x=float(e[EGO_SPEED]),
        a_x=float(e[EGO_ACCEL]),
        a_y=float(e[EGO_SPEED] * yaw_rate),
        yaw_rate=float(yaw_rate),
    )


def _lateral_progress(log: EpisodeLog, i0: int, i1: int) -> float:
    """Change of the left-positive lane offset from step i0 to i1, summing only steps that
    stay on one road (the lane-0 reference may jump where the road segment changes)."""
    lat = log.ego[i0 : i1 + 1, EGO_LAT]
    roads = [lane[:2] for lane in log.ego_lane[i0 : i1 + 1]]
    same = np.array([a == b for a, b in zip(roads[:-1], roads[1:], strict=True)], dtype=bool)
    return float(np.sum(np.diff(lat)[same])) if len(lat) > 1 else 0.0


def meta_behaviour(
    speeds: np.ndarray, dv: float, dyaw: float, dlat: float, in_junction: bool
) -> tuple[Longitudinal, Lateral]:
    """The meta behaviour from the motion over a sample's 5 s future: `speeds` the speeds
    (m/s) from t0 to t0 + 5 s, `dv` the speed change over the first `LONGITUDINAL_WINDOW_S`,
    `dyaw` the heading change (rad, unwrapped) and `dlat` the left-positive lateral progress
    across the lanes (m) over the 5 s, `in_junction` whether the future crosses a junction.
    The simulator's labels and the bag data sets (replay/dataset.py) share these rules."""
    if float(np.min(speeds)) < STOP_SPEED_MPS:
        longitudinal = Longitudinal.STOP
    elif dv > SPEED_CHANGE_MPS:
        longitudinal = Longitudinal.ACCELERATE
    elif dv < -SPEED_CHANGE_MPS:
        longitudinal = Longitudinal.DECELERATE
    else:
        longitudinal = Longitudinal.KEEP
    if dyaw > TURN_YAW_RAD:
        lateral = Lateral.TURN_LEFT
    elif dyaw < -TURN_YAW_RAD:
        lateral = Lateral.TURN_RIGHT
    elif dlat > LANE_CHANGE_M:
        lateral = Lateral.LANE_CHANGE_LEFT
    elif dlat < -LANE_CHANGE_M:
        lateral = Lateral.LANE_CHANGE_RIGHT
    elif in_junction:
        lateral = Lateral.STRAIGHT
    else:
        lateral = Lateral.LANE_FOLLOW
    return longitudinal, lateral


def _meta(log: EpisodeLog, t0: float) -> tuple[Longitudinal, Lateral]:
    i0, i_end = log.index_at(t0), log.index_at(t0 + HORIZON_S)
    speeds = log.ego[i0 : i_end + 1, EGO_SPEED]
    dv = float(_interp_ego(log, np.array([t0 + LONGITUDINAL_WINDOW_S]), EGO_SPEED)[0] - speeds[0])
    dyaw = float(log.ego[i_end, EGO_YAW] - log.ego[i0, EGO_YAW])
    dlat = _lateral_progress(log, i0, i_end)
    return meta_behaviour(speeds, dv, dyaw, dlat, bool(log.ego_in_junction[i0 : i_end + 1].any()))


def _route_command(log: EpisodeLog, t0: float) -> str:
    i0, i1 = log.index_at(t0), log.index_at(t0 + ROUTE_LOOKAHEAD_S)
    dyaw = float(log.ego[i1, EGO_YAW] - log.ego[i0, EGO_YAW])
    if dyaw > np.radians(45.0):
        return "turn_left"
    if dyaw < -np.radians(45.0):
        return "turn_right"
    return "straight" if log.ego_in_junction[i0 : i1 + 1].any() else DEFAULT_ROUTE_COMMAND


def _situation(log: EpisodeLog, t0: float) -> tuple[dict[str, bool], Situation]:
    """Critical objects and the facts the explanation talks about."""
    i0 = log.index_at(t0)
    e = log.ego[i0]
    x0, y0, yaw0, v0 = e[EGO_X], e[EGO_Y], e[EGO_YAW], e[EGO_SPEED]
    critical = dict.fromkeys(CRITICAL_OBJECT_KEYS, False)
    sit = Situation(ego_speed=float(v0))
    times = t0 + np.arange(0.0, CONFLICT_WINDOW_S + 1e-9, FUTURE_DT_S)  # (K,)
    idx = np.array([log.index_at(t) for t in times])
    ego_path = log.ego[idx][:, [EGO_X, EGO_Y]]  # (K, 2)
    near_dt = np.abs(times[:, None] - times[None, :]) <= CONFLICT_DT_S  # (K, K)
    for j in np.flatnonzero(log.present[i0]):
        static = log.box_static[j]
        b = log.boxes[i0, j]
        dx, dy = to_ego_frame(b[[BOX_X, BOX_Y]], x0, y0, yaw0)
        if static.kind == KIND_OBSTACLE:
            if 0.0 < dx < HAZARD_AHEAD_M and abs(dy) < 8.0:
                critical["road_hazard"] = True
                sit.hazard_ahead_m = min(sit.hazard_ahead_m or np.inf, float(dx))
            continue
        if static.kind != KIND_VEHICLE:
            continue
        heading_diff = abs(float(wrap_angle(b[BOX_YAW] - yaw0)))
        in_lane_line = abs(dy) < SAME_LANE_M and heading_diff < SAME_HEADING_RAD
        ahead = in_lane_ahead(float(dx), float(dy), heading_diff)
        if (-NEARBY_BEHIND_M < dx < NEARBY_AHEAD_M and abs(dy) < NEARBY_SIDE_M) or np.hypot(
            dx, dy
        ) < NEARBY_RADIUS_M:
            critical["nearby_vehicle"] = True
        if ahead and (sit.lead_gap_m is None or dx < sit.lead_gap_m):
            sit.lead_gap_m, sit.lead_speed = float(dx), float(b[BOX_SPEED])
        present = log.present[idx, j]
        if in_lane_line or not present.any():
            continue
        path = log.boxes[idx, j][:, [BOX_X, BOX_Y]]  # (K, 2)
        dist = np.linalg.norm(ego_path[:, None] - path[None, :], axis=-1)  # (K ego, K other)
        dist[:, ~present] = np.inf
        if np.any(dist[near_dt] < CONFLICT_DIST_M):
            critical["conflicting_vehicle"] = True
            crossing = heading_diff > np.radians(45.0)
            kind = "crossing" if crossing else ("merging" if dx > -5.0 else "behind")
            side = "left" if dy > 0 else "right"
            if sit.conflict is None or np.hypot(dx, dy) < sit.conflict_dist_m:
                sit.conflict, sit.conflict_side = kind, side
                sit.conflict_dist_m = float(np.hypot(dx, dy))
    return critical, sit


def label_at(
    log: EpisodeLog,
    t0: float,
    history_s: float = 3.0,
    history_period_s: float = 0.5,
    fits: Callable[[str], bool] | None = None,
) -> SampleLabel:
    """The full label at t0 (needs t0 + 5 s in the log and t0 >= 0). `fits(text)` says
    whether an explanation fits the model's budget (see `explain`)."""
    if t0 < 0 or t0 + HORIZON_S > log.duration + 1e-6:
        raise LabelError(
            f"t0={t0}: needs 0 <= t0 and t0 + {HORIZON_S} s <= episode duration {log.duration}"
        )
    i0 = log.index_at(t0)
    x0, y0, yaw0 = log.ego[i0, EGO_X], log.ego[i0, EGO_Y], log.ego[i0, EGO_YAW]
    future_t = np.arange(1, int(round(HORIZON_S / FUTURE_DT_S)) + 1) * FUTURE_DT_S  # (20,)
    abs_t = t0 + future_t
    odom_xy = np.stack([_interp_ego(log, abs_t, EGO_X), _interp_ego(log, abs_t, EGO_Y)], -1)
    future_xy = to_ego_frame(odom_xy, x0, y0, yaw0)  # (20, 2)
    future_yaw = _interp_ego(log, abs_t, EGO_YAW) - yaw0
    future_speed = _interp_ego(log, abs_t, EGO_SPEED)
    per_wp = int(round(WAYPOINT_PERIOD_S / FUTURE_DT_S))
    waypoints = future_xy[per_wp - 1 :: per_wp]  # t = 1..5 s, (5, 2)
    longitudinal, lateral = _meta(log, t0)
    critical, sit = _situation(log, t0)
    sit.longitudinal, sit.lateral = longitudinal, lateral
    rng = np.random.default_rng([log.seed, i0, 11])
    answer = DrivingAnswer(
        critical_objects=critical,
        explanation=explain(sit, rng, fits),
        longitudinal=longitudinal,
        lateral=lateral,
        waypoints=waypoints,
    )
    num_hist = int(round(history_s / history_period_s))
    hist_t = t0 - history_period_s * np.arange(num_hist, -1, -1)
    history = tuple(ego_state(log, log.index_at(max(t, 0.0))) for t in hist_t)
    return SampleLabel(
        stamp_ns=seconds_to_ns(float(log.t[i0])),
        t0=float(log.t[i0]),
        answer=answer,
        future_t=future_t,
        future_xy=future_xy,
        future_yaw=future_yaw,
        future_speed=future_speed,
        history=history,
        route_command=_route_command(log, t0),
        facts=sit.as_facts(),
    )


def explanation_budget_fits(schema=None, tokenizer=None) -> Callable[[str], bool]:
    """`fits(text)`: the explanation encodes to at most `schema.explanation_budget` tokens
    (defaults: the reference model's schema and tokenizer)."""
    from blockplan.schema import default_schema, default_tokenizer
    from blockplan.schema.answer import escape_explanation

    schema = schema or default_schema()
    tokenizer = tokenizer or default_tokenizer()
    budget = schema.explanation_budget

    def fits(text: str) -> bool:
        return len(tokenizer.encode(escape_explanation(text))) <= budget

    return fits
