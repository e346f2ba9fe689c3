"""Synthetic observations take their ego history from the schema."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.bench.stream_sequence import stream_observation
from blockplan.config import PlannerConfig
from blockplan.planner.synthetic import straight_history, synthetic_observation
from blockplan.schema import DrivingSchema, ego_history_array
from blockplan.types import NS_PER_S


@pytest.mark.parametrize("num_history, period_s", [(7, 0.5), (3, 0.5), (5, 0.25)])
def test_the_history_has_one_state_per_prompt_row(num_history, period_s):
    schema = DrivingSchema(num_history=num_history, history_period_s=period_s)
    history = straight_history(100 * NS_PER_S, 10.0, schema)
    stamps = np.array([s.stamp_ns for s in history])
    assert len(history) == num_history and stamps[-1] == 100 * NS_PER_S
    assert np.all(np.diff(stamps) == round(period_s * NS_PER_S))
    rows = ego_history_array(history, 100 * NS_PER_S, schema)  # (num_history, 6)
    expected_x = -10.0 * period_s * np.arange(num_history - 1, -1, -1)
    assert np.allclose(rows[:, 0], expected_x) and np.allclose(rows[:, 2], 10.0)


def test_the_default_schema_gives_seven_states_over_three_seconds():
    obs = synthetic_observation(PlannerConfig(), seed=0)
    assert len(obs.ego_history) == DrivingSchema().num_history == 7
    assert obs.stamp_ns - obs.ego_history[0].stamp_ns == 3 * NS_PER_S


def test_observations_follow_the_schema_they_are_given():
    schema = dataclasses.replace(DrivingSchema(), num_history=3)
    for obs in (
        synthetic_observation(PlannerConfig(), seed=1, schema=schema),
        stream_observation(PlannerConfig(), tick=2, schema=schema),
    ):
        assert len(obs.ego_history) == 3 and obs.ego_history[-1].stamp_ns == obs.stamp_ns
