"""The blind baseline (joints + task one-hot): a task its data set never showed is an error,
not an all-zero one-hot that stands for no task at all."""

from __future__ import annotations

import pytest

from blockplan.closedloop.robot import BlindPolicy, blind_actor
from blockplan.errors import UserError


def test_the_blind_baseline_refuses_an_instruction_it_was_not_fitted_on():
    blind = BlindPolicy(["open the door"], [-1.0] * 9, [1.0] * 9, horizon=4, action_dim=4)
    act = blind_actor(blind, "open the door", replan_steps=2)
    assert callable(act)
    with pytest.raises(UserError, match="close the drawer"):
        blind_actor(blind, "close the drawer", replan_steps=2)
