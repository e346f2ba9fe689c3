"""Trajectory maths (numpy/scipy, no torch): JMT upsampling, rollout averaging, stitching,
validity gates, fallback and displacement metrics (docs/ALGORITHMS.md §5, §9).

All trajectories are `blockplan.types.Trajectory` in the ego frame at their stamp.
"""

from blockplan.trajectory import metrics
from blockplan.trajectory.curve import StateCurve
from blockplan.trajectory.fallback import Fallback, FallbackResult
from blockplan.trajectory.frames import MIN_SPEED_FOR_HEADING, KinematicState, Pose2D
from blockplan.trajectory.gates import GateReport, GateViolation, check_gates
from blockplan.trajectory.jmt import evaluate_quintic, quintic_coefficients
from blockplan.trajectory.kinematics import (
    curve_from_trajectory,
    sample_times,
    state_at,
    states_from_trajectory,
    trajectory_from_states,
)
from blockplan.trajectory.rollouts import (
    RolloutAverage,
    average_rollouts,
    average_waypoint_rollouts,
    consensus_rollouts,
)
from blockplan.trajectory.smooth import fit_knots, smooth_upsample
from blockplan.trajectory.stitch import continued_state, speed_join, stitch
from blockplan.trajectory.stop import stop_trajectory
from blockplan.trajectory.upsample import constant_velocity_waypoints, knot_states, upsample

__all__ = [
    "MIN_SPEED_FOR_HEADING",
    "Fallback",
    "FallbackResult",
    "GateReport",
    "GateViolation",
    "KinematicState",
    "Pose2D",
    "RolloutAverage",
    "StateCurve",
    "average_rollouts",
    "consensus_rollouts",
    "continued_state",
    "average_waypoint_rollouts",
    "check_gates",
    "fit_knots",
    "constant_velocity_waypoints",
    "curve_from_trajectory",
    "evaluate_quintic",
    "knot_states",
    "metrics",
    "quintic_coefficients",
    "sample_times",
    "state_at",
    "states_from_trajectory",
    "stitch",
    "stop_trajectory",
    "trajectory_from_states",
    "smooth_upsample",
    "speed_join",
    "upsample",
]
