"""Closed-loop evaluation: a planner drives the ego of a highway-env scenario through the
live runtime (rendered cameras, odometry, route command → plan → stitched trajectory) and a
tracking controller (pure pursuit + speed PID → highway-env's ContinuousAction), next to the
IDM/MOBIL expert and the constant-velocity baseline on the same seeds."""

from blockplan.closedloop.controller import Command, ControllerConfig, TrackingController
from blockplan.closedloop.episode import (
    EXPERT,
    EpisodeSpec,
    PlannerDriver,
    WarmupCrash,
    run_expert_episode,
    run_planner_episode,
)
from blockplan.closedloop.evaluation import Evaluation, run_evaluation
from blockplan.closedloop.metrics import EpisodeResult, Trace, aggregate
from blockplan.closedloop.route import route_command
from blockplan.closedloop.world import ClosedLoopWorld

__all__ = [
    "EXPERT",
    "ClosedLoopWorld",
    "Command",
    "ControllerConfig",
    "EpisodeResult",
    "EpisodeSpec",
    "Evaluation",
    "PlannerDriver",
    "Trace",
    "TrackingController",
    "WarmupCrash",
    "aggregate",
    "route_command",
    "run_evaluation",
    "run_expert_episode",
    "run_planner_episode",
]
