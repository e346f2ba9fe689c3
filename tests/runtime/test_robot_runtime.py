"""RobotRuntime: chunk stitching by time index, receding-horizon requests, hold-position
fallback, input faults and diagnostics, with a scripted planner on a virtual clock."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blockplan.config import PlannerConfig
from blockplan.planner.embodiment import robot_config
from blockplan.runtime.clock import VirtualClock
from blockplan.runtime.robot import RobotRuntime
from blockplan.types import ActionPlan, CameraFrame

JOINTS = tuple(PlannerConfig().robot.joint_name_list)
PERIOD = 12_500_000  # ns, robot.chunk_period_s
H, D = 8, 4


@dataclasses.dataclass
class Schema:
    horizon: int = H
    action_dim: int = D
    proprio_dim: int = len(JOINTS)


class ScriptedPlanner:
    """Chunk k (the k-th call) is k + 0.01·step in every dimension (gripper: +1)."""

    def __init__(self, fail_on: set[int] | None = None, bad_on: set[int] | None = None) -> None:
        self.schema = Schema()
        self.calls: list = []
        self.fail_on, self.bad_on = fail_on or set(), bad_on or set()

    def plan(self, observation):
        k = len(self.calls)
        self.calls.append(observation)
        if k in self.fail_on:
            raise RuntimeError("boom")
        actions = k + 0.01 * np.arange(H)[:, None] * np.ones((1, D))
        if k in self.bad_on:
            actions[3, 1] = np.nan
        return ActionPlan(observation.stamp_ns, actions, np.zeros((H, D), int), actions[None])


def make(planner=None, **robot):
    config = robot_config(PlannerConfig(), ("front", "wrist"), 1)
    config = config.with_params(
        {
            "control.rate_hz": 80.0,
            "frame_window.frame_period_s": 0.05,
            "frame_window.max_frame_age_s": 0.1,
            "frame_window.stale_camera_policy": "fallback",
            "control.max_plan_age_s": 0.5,
            "robot.instruction": "reach the red goal marker",
            **{f"robot.{k}": v for k, v in robot.items()},
        }
    )
    clock = VirtualClock(10**12)
    planner = planner or ScriptedPlanner()
    return RobotRuntime(config, planner, clock, timing="ideal"), clock, planner


def feed(runtime, clock, t, frames=True, joints=True):
    stamp = 10**12 + t * PERIOD
    clock.set(stamp)
    if frames:
        for cam in ("front", "wrist"):
            runtime.on_frame(CameraFrame(cam, stamp, np.zeros((8, 8, 3), np.uint8)))
    if joints:
        runtime.on_joint_state(stamp, JOINTS, np.arange(len(JOINTS), dtype=float))
    return runtime.tick()


def test_receding_horizon_replans_every_k_steps_and_stitches_by_time():
    runtime, clock, planner = make(replan_steps=4)
    outs = [feed(runtime, clock, t, frames=t % 4 == 0) for t in range(12)]
    assert len(planner.calls) == 3  # at steps 0, 4, 8
    assert [o.is_requested for o in outs] == [t % 4 == 0 for t in range(12)]
    for t, out in enumerate(outs):
        chunk, step = divmod(t, 4)
        assert not out.is_fallback
        assert out.step_index == step
        np.testing.assert_allclose(out.action, chunk + 0.01 * step)
    # the observation: joints at the tick, the frames of both cameras, the instruction
    obs = planner.calls[1]
    assert obs.stamp_ns == 10**12 + 4 * PERIOD
    assert [f.camera for f in obs.frames] == ["front", "wrist"]
    assert obs.instruction == "reach the red goal marker"
    np.testing.assert_array_equal(obs.proprio, np.arange(len(JOINTS)))


def test_temporal_ensembling_averages_every_chunk_that_covers_the_step():
    """replan every 2 steps of 8: at step t the chunks of steps 0, 2, … ≤ t that reach t
    (at most 4) are averaged with weight exp(-m·i), i = 0 the oldest."""
    m = 0.5
    runtime, clock, planner = make(replan_steps=2, temporal_ensemble=m)
    outs = [feed(runtime, clock, t) for t in range(12)]
    for t, out in enumerate(outs):
        covering = [k for k in range(len(planner.calls)) if 0 <= t - 2 * k < H]
        values = np.array([k + 0.01 * (t - 2 * k) for k in covering])
        weights = np.exp(-m * np.arange(len(covering)))
        assert not out.is_fallback and out.source is not None
        assert out.step_index == t % 2  # the newest chunk's step, as without ensembling
        np.testing.assert_allclose(out.action, np.full(D, weights @ values / weights.sum()))
    assert len(covering) == 4  # the full overlap was exercised


def test_without_ensembling_the_newest_chunk_alone_decides():
    runtime, clock, planner = make(replan_steps=2)
    outs = [feed(runtime, clock, t) for t in range(6)]
    np.testing.assert_allclose(outs[5].action, 2 + 0.01)  # chunk 2 (step 4), its step 1


def test_an_ensemble_forgets_the_chunks_of_an_old_timeline():
    runtime, clock, planner = make(replan_steps=2, temporal_ensemble=0.1)
    for t in range(4):
        feed(runtime, clock, t)
    runtime.reset("test")
    out = feed(runtime, clock, 4)
    np.testing.assert_allclose(out.action, len(planner.calls) - 1)  # the new chunk alone


def test_a_chunk_is_stitched_at_its_matching_index_when_ticks_skip_steps():
    runtime, clock, planner = make(replan_steps=8)
    feed(runtime, clock, 0)
    out = feed(runtime, clock, 3, frames=False)  # a 30 Hz tick lands on chunk step 3
    assert out.step_index == 3 and out.source is not None
    np.testing.assert_allclose(out.action, 0.03)
    out = feed(runtime, clock, 9, frames=False)  # past the horizon, frames stale: hold
    assert out.is_fallback and out.step_index == -1


def test_hold_position_without_a_chunk_keeps_the_last_gripper_command():
    runtime, clock, planner = make(replan_steps=4)
    out = feed(runtime, clock, 0, frames=False)
    assert out.is_fallback and "cameras stale or missing: front, wrist" in out.reason
    np.testing.assert_array_equal(out.action, np.zeros(D))
    feed(runtime, clock, 1)  # a chunk: gripper 0.0 + 0.01·0
    out = feed(runtime, clock, 2, frames=False)
    assert not out.is_fallback and out.action[-1] == pytest.approx(0.01)
    # the joint state stops: stale joints force the hold, the gripper stays as commanded
    out = feed(runtime, clock, 40, frames=True, joints=False)
    assert out.is_fallback and "joint state" in out.reason
    np.testing.assert_allclose(out.action, [0, 0, 0, 0.01])


def test_stale_cameras_hold_under_the_fallback_policy():
    runtime, clock, planner = make(replan_steps=1)
    feed(runtime, clock, 0)
    feed(runtime, clock, 5, frames=False)  # the frames of step 0 are 62.5 ms old: fresh
    assert len(planner.calls) == 2
    out = feed(runtime, clock, 10, frames=False)  # 125 ms > max_frame_age_s: stale
    assert out.is_fallback and "cameras stale" in out.reason
    assert len(planner.calls) == 2


def test_planner_errors_and_invalid_chunks_never_stop_the_loop():
    planner = ScriptedPlanner(fail_on={0}, bad_on={1})
    runtime, clock, _ = make(planner, replan_steps=1)
    outs = [feed(runtime, clock, t) for t in range(3)]
    assert outs[0].is_fallback and outs[1].is_fallback  # error, then a NaN chunk
    assert not outs[2].is_fallback
    counts = runtime.health.counts()
    assert counts["planner_errors"] == 1 and counts["invalid_plans"] == 1
    names = {s.name: s for s in runtime.diagnostics()}
    assert {
        "blockplan: control loop",
        "blockplan: joint states",
        "blockplan: inputs",
        "blockplan: camera front",
        "blockplan: camera wrist",
    } <= set(names)


def test_bad_joint_states_are_rejected_and_reported():
    runtime, clock, _ = make()
    assert not runtime.on_joint_state(1, JOINTS[:-1], np.zeros(len(JOINTS) - 1))  # a joint missing
    assert not runtime.on_joint_state(1, JOINTS, np.zeros(3))  # names and values disagree
    assert not runtime.on_joint_state(1, JOINTS, np.full(len(JOINTS), np.nan))
    assert runtime.on_joint_state(5, ("extra", *reversed(JOINTS)), np.arange(len(JOINTS) + 1.0))
    np.testing.assert_array_equal(runtime.joints.positions, np.arange(len(JOINTS), 0, -1))
    assert not runtime.on_joint_state(4, JOINTS, np.zeros(len(JOINTS)))  # out of order
    counts = runtime.health.counts()
    assert counts["invalid_joint_state"] == 3 and counts["out_of_order_joint_states"] == 1
    inputs = {s.name: s for s in runtime.diagnostics()}["blockplan: inputs"]
    assert inputs.level == 1 and "invalid_joint_state" in inputs.message


def test_no_instruction_means_no_request_and_a_time_jump_resets():
    runtime, clock, planner = make(instruction="")
    out = feed(runtime, clock, 0)
    assert out.is_fallback and not planner.calls
    runtime.on_instruction("push the puck to the green marker")
    feed(runtime, clock, 1)
    assert planner.calls[-1].instruction == "push the puck to the green marker"
    clock.set(10**12 - 10**10)  # 10 s back
    out = runtime.tick()
    assert runtime.health.counts()["time_jumps"] == 1 and out.is_fallback
