"""The planner contract the runtime drives, and a real baseline that honours it."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from blockplan.trajectory import KinematicState, constant_velocity_waypoints
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    DrivingAnswer,
    Lateral,
    Longitudinal,
    Observation,
    Plan,
)


class RuntimePlanner(Protocol):
    """Anything that turns an observation into a plan (blockplan.planner.Planner does)."""

    def plan(self, observation: Observation) -> Plan: ...

    def reset(self) -> None:
        """Forget what carries over from one plan to the next (a streaming planner's frames
        and counters): the next plan starts afresh, as after loading."""
        ...


class HistorySpec(NamedTuple):
    """The ego history a planner was trained with: `num_states` states `period_s` apart,
    the newest at t0 (the schema's `num_history` and `history_period_s`)."""

    num_states: int
    period_s: float

    @property
    def span_s(self) -> float:
        return (self.num_states - 1) * self.period_s


def history_spec(planner: RuntimePlanner) -> HistorySpec:
    """The history `planner` needs: its schema's (an engine planner reads it from the model's
    config.json), else the default schema's (what the data set records; the baselines)."""
    schema = getattr(planner, "schema", None)
    if schema is None:
        from blockplan.schema.spec import DrivingSchema

        schema = DrivingSchema()
    return HistorySpec(int(schema.num_history), float(schema.history_period_s))


class ConstantVelocityPlanner:
    """The constant-velocity baseline (docs/ALGORITHMS.md §9): keep the ego's current velocity
    vector for 5 s. It ignores the images; it is the bar a learned planner must beat."""

    def plan(self, observation: Observation) -> Plan:
        if not observation.ego_history:
            raise ValueError("ConstantVelocityPlanner: the observation has no ego state")
        state = KinematicState.from_ego_state(observation.ego_history[-1])
        return baseline_plan(
            observation.stamp_ns,
            constant_velocity_waypoints(state),  # (5, 2)
            f"constant velocity baseline at {state.v:.2f} m/s",
            Longitudinal.KEEP if state.v > 0 else Longitudinal.STOP,
        )

    def reset(self) -> None:
        """Nothing to forget: every plan depends on its observation only."""


def baseline_plan(
    stamp_ns: int,
    waypoints: np.ndarray,
    explanation: str,
    longitudinal: Longitudinal = Longitudinal.KEEP,
) -> Plan:
    """The plan of a baseline that only makes waypoints (5, 2): no critical objects, lane
    follow, the waypoints as its single rollout."""
    answer = DrivingAnswer(
        critical_objects=dict.fromkeys(CRITICAL_OBJECT_KEYS, False),
        explanation=explanation,
        longitudinal=longitudinal,
        lateral=Lateral.LANE_FOLLOW,
        waypoints=waypoints,
    )
    return Plan(stamp_ns=stamp_ns, answer=answer, rollouts=waypoints[None])


def plan_rollouts(plan: Plan) -> np.ndarray:
    """(N, 5, 2) rollouts of a plan (its answer's waypoints when it has none)."""
    rollouts = np.asarray(plan.rollouts, dtype=np.float64)
    if rollouts.size == 0:
        return np.asarray(plan.answer.waypoints, dtype=np.float64)[None]
    return rollouts
