"""Runtime limits that are not part of the planner configuration: plausibility bounds on
inputs and bookkeeping sizes. Each default states why it is what it is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeLimits:
    # A stamp this far behind the newest one is a time jump (a looping bag, a restarted
    # simulator), not late delivery: every buffer and plan is reset.
    time_jump_s: float = 1.0
    # Frames kept per camera and window frame: old frames are thinned so the buffer still
    # spans the whole window at any camera rate.
    frames_per_window_frame: int = 8
    # Odometry: an acceleration implied by consecutive samples above this (~2.5 g) or a
    # position that disagrees with the reported velocity by more than the tolerance is an
    # outlier. After this many consecutive outliers the history restarts from the new data
    # (the source relocalised).
    max_plausible_accel: float = 25.0
    position_tolerance_m: float = 1.0
    max_consecutive_outliers: int = 5
    # Acceleration is differenced over at least this span (noisy fast odometry wants more).
    # 50 ms: the simulator step the training labels' acceleration is taken over, so 20 Hz
    # odometry gives the trained values exactly (runtime/ego.py).
    accel_window_s: float = 0.05
    # Odometry older than this is stale: the ego pose is extrapolated at most this far.
    max_odometry_age_s: float = 0.5
    # The lane pose (localisation on the map) is used when one is at most this much older
    # than the window's stamp, and never a later one: 0.25 s at 20 m/s is 5 m of road, and a
    # localisation publishes at 10 Hz or faster. Otherwise the planner plans without it.
    max_lane_pose_age_s: float = 0.25
    # The car ahead (a tracker's or radar's report) likewise: 0.25 s covers a 10 Hz radar
    # with one report lost; at a 10 m/s closing speed it is 2.5 m of gap.
    max_lead_age_s: float = 0.25
    # The lanes beside (the map's lane count and the tracker's cars beside) likewise.
    max_beside_age_s: float = 0.25
    # The router's path is in odom and covers well ahead: it stays good while the ego drives
    # along it; 1 s covers a 2 Hz router with one message lost.
    max_route_age_s: float = 1.0
    # Ego history kept (s; at least: the runtime keeps the planner's history span and more)
    # and the number of latency samples behind the p50/p99.
    ego_history_s: float = 10.0
    latency_window: int = 1000
    # A camera image larger than this (pixels, H x W) is refused, not stored (a frame is kept
    # ~16 times over in the window's buffer): 4096 x 3072 (12.6 MP) is beyond any driving or
    # wrist camera a planner reads (the sim rig's are 160 x 96; the model resizes anyway).
    max_image_pixels: int = 4096 * 3072
    # A camera's frames closer together than 1 / this (by stamp) are dropped before they are
    # decoded or stored, and counted (`rate_limited_frames`): cameras run at 10-60 Hz, so
    # this only bites a flood (a misconfigured driver at 1 kHz), whose CPU it bounds.
    max_camera_rate_hz: float = 200.0

    def __post_init__(self) -> None:
        for name in (
            "time_jump_s",
            "max_plausible_accel",
            "position_tolerance_m",
            "accel_window_s",
            "max_odometry_age_s",
            "max_lane_pose_age_s",
            "max_lead_age_s",
            "max_beside_age_s",
            "max_route_age_s",
            "ego_history_s",
            "max_camera_rate_hz",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"RuntimeLimits.{name}={value!r}: must be > 0")
        for name in (
            "frames_per_window_frame",
            "max_consecutive_outliers",
            "latency_window",
            "max_image_pixels",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"RuntimeLimits.{name}={getattr(self, name)!r}: must be >= 1")
