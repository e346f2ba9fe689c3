"""`trajectory.*`, `gates.*`, `lane_guard.*`, `comfort.*`: the published trajectory and
the checks on a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config.fields import MAX_TRAJECTORY_POINTS, _check, _check_fields, choice, signed

STITCH_FROM = ("odometry", "published")


@dataclass(frozen=True)
class TrajectoryOutputConfig:
    """The published trajectory: the jerk-minimizing fit of the waypoints within
    `waypoint_tolerance_m` (0: the WOD-E2E JMT interpolation, exactly through them), sampled
    at `dt` over `horizon_s`, stitched onto the commanded state: the plan retimed along its
    path so that the commanded speed meets its speed profile over `speed_join_s`, then the
    JMT join onto it over `stitch_duration_s`. The commanded state (`stitch_from`) is the
    measured one (`odometry`), or what the previously published trajectory commands now
    (`published`: consecutive trajectories C2-continuous) while the ego is within
    `stitch_max_error_m` and `stitch_max_speed_error` of it."""

    dt: float = signed(0.25, "> 0")
    horizon_s: float = signed(5.0, "> 0")
    stitch_duration_s: float = 0.5
    # The commanded speed meets the plan's speed profile over this (s) along the plan's path
    # (trajectory/stitch.py `retime`); 0: the plan's timing is kept (the position join alone
    # catches up with it, which overshoots and oscillates plan to plan: mean |jerk| 3.6 m/s³
    # on the closed-loop highway, 1.2 with 1.5 s; docs/BENCHMARKS.md "Ride comfort").
    speed_join_s: float = signed(0.0, ">= 0")
    stitch_from: str = choice("odometry", STITCH_FROM)
    stitch_max_error_m: float = signed(1.0, "> 0")
    stitch_max_speed_error: float = signed(1.0, "> 0")  # m/s
    # A waypoint's distance from the published path may be up to this (m): ±0.5 m of waypoint
    # noise on a 20 m/s cruise then gives ~6 m/s³ of jerk at most, not ~20 (trajectory/smooth.py);
    # 0.2 m and more let a car tracking the expert's roundabout path leave the lane
    # (docs/RUNTIME.md "The published path").
    waypoint_tolerance_m: float = signed(0.15, ">= 0")

    def __post_init__(self) -> None:
        _check_fields(self, "trajectory")
        _check(
            self.dt <= self.horizon_s, "trajectory.dt", self.dt, "must be <= trajectory.horizon_s"
        )
        points = self.horizon_s / self.dt
        _check(
            points <= MAX_TRAJECTORY_POINTS,
            "trajectory.horizon_s / trajectory.dt",
            points,
            f"points per published trajectory: must be <= {MAX_TRAJECTORY_POINTS}",
        )
        _check(
            0.0 <= self.stitch_duration_s < self.horizon_s,
            "trajectory.stitch_duration_s",
            self.stitch_duration_s,
            "must be in [0, horizon_s)",
        )
        _check(
            self.speed_join_s <= self.horizon_s,
            "trajectory.speed_join_s",
            self.speed_join_s,
            "must be <= trajectory.horizon_s",
        )


@dataclass(frozen=True)
class GateConfig:
    """Hard feasibility limits on a plan's published trajectory: beyond any of them the plan
    is rejected and the fallback published. Set for what a car cannot do (or a decoding
    error, e.g. a wrong leading digit, makes it do), calibrated so that the simulator
    expert's own futures pass in >= 99 % of the test samples of every scenario
    (docs/BENCHMARKS.md "Validity gates")."""

    max_speed: float = signed(40.0, "> 0")
    min_accel: float = signed(-8.0, "< 0")  # ≈ 0.8 g: emergency braking on dry asphalt
    max_accel: float = signed(8.0, "> 0")
    max_lateral_accel: float = signed(10.0, "> 0")  # ≈ 1 g: no tyre holds more
    max_abs_jerk: float = signed(50.0, "> 0")
    max_yaw_rate: float = signed(2.0, "> 0")
    # Below this speed (m/s) the yaw rate is not checked: a path's heading at a standstill is
    # fit noise (the fit's curvature at 0.6 m/s), harmless at that speed (lateral
    # acceleration = speed · yaw rate, checked everywhere).
    yaw_rate_min_speed: float = signed(3.0, ">= 0")

    def __post_init__(self) -> None:
        _check_fields(self, "gates")


@dataclass(frozen=True)
class LaneGuardConfig:
    """A check of each rollout against the lanes beside (/perception/lanes_beside: the
    map's lane counts, the tracker's cars beside), where a report is at hand: a rollout that
    moves more than `change_m` sideways out of the ego's lane (its lateral offset in the
    lane frame at t0, from the lane pose when known) towards a side with no lane, or with a
    car beside nearer than `clear_ahead_m` ahead or `clear_behind_m` behind, is dropped
    from the average; a plan left with none is rejected like one that fails the gates.
    The check only applies where the road is straight: the ego's yaw changed by at most
    `straight_yaw_rad` over the last second and the rollout turns by at most `max_turn_rad`
    (in a curve the lines beside are elsewhere, and a lane count says nothing of it). Calibrated so that the
    simulator expert's own futures pass in >= 99.8 % of the samples of every scenario
    (docs/BENCHMARKS.md "Validity gates")."""

    # Off by default: in closed loop it made the shipped greedy planner worse (a rejected
    # lane change leaves the fallback holding a stale plan; docs/BENCHMARKS.md).
    enabled: bool = False
    change_m: float = signed(2.0, "> 0")  # half a 4 m lane: the ego's centre crosses the line
    clear_ahead_m: float = signed(5.0, ">= 0")
    clear_behind_m: float = signed(5.0, ">= 0")
    max_turn_rad: float = signed(0.1, ">= 0")  # a lane change at speed turns by < 0.1 rad
    straight_yaw_rad: float = signed(0.02, ">= 0")

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), "lane_guard.enabled", self.enabled, "must be a bool")
        _check_fields(self, "lane_guard")


@dataclass(frozen=True)
class ComfortConfig:
    """Comfort limits (Alpamayo's, docs/ALGORITHMS.md §9): a plan beyond them is still published;
    the excess is counted (`uncomfortable_plans`) and reported on /diagnostics and in the
    metrics. Same checks as the hard `gates`."""

    max_speed: float = signed(40.0, "> 0")
    min_accel: float = signed(-4.05, "< 0")
    max_accel: float = signed(2.40, "> 0")
    max_lateral_accel: float = signed(4.89, "> 0")
    max_abs_jerk: float = signed(8.37, "> 0")
    max_yaw_rate: float = signed(0.95, "> 0")
    yaw_rate_min_speed: float = signed(0.0, ">= 0")  # m/s: the yaw rate is checked at every speed

    def __post_init__(self) -> None:
        _check_fields(self, "comfort")
