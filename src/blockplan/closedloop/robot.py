"""Closed loop on Meta-World (`blockplan closed-loop --embodiment robot`; docs/BENCHMARKS.md
"Robots"): each policy runs the same seeded episodes of a task until Meta-World reports
success or `max_steps` control steps pass.

* `model`: the robot planner through `RobotRuntime` on a virtual clock — frames rendered every
  `render_every` steps go into its frame window, the joint state every step, the runtime
  ticks once per control step and its published action is applied (receding horizon: the
  runtime asks for a new chunk once `robot.replan_steps` steps of the newest have started;
  timing `ideal`: a chunk is ready at its request's tick);
* `expert`: Meta-World's scripted policy (it reads the full simulator state);
* `blind`: `BlindPolicy`, an MLP from the joint positions and the task (the instruction) to
  the chunk, trained on the same data set's train split; it never sees a camera. It executes
  its chunks with the same receding horizon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockplan.errors import UserError
from blockplan.runtime.clock import VirtualClock
from blockplan.sim.manipulation import (
    CONTROL_PERIOD_S,
    JOINT_NAMES,
    ManipulationEnv,
    StepObservation,
)
from blockplan.types import CameraFrame

log = logging.getLogger(__name__)
ROBOT_POLICIES = ("model", "expert", "blind")
START_NS = 1_700_000_000 * 1_000_000_000


@dataclass
class EpisodeResult:
    policy: str
    task: str
    seed: int
    success: bool
    steps: int  # control steps until success (max_steps when it failed)
    actions: list[list[float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


# ---- the blind baseline ------------------------------------------------------------------------


class BlindPolicy:
    """Joint positions + task one-hot → an (H, D) chunk; MSE on the train split."""

    def __init__(
        self,
        instructions: Sequence[str],
        proprio_low,
        proprio_high,
        horizon: int,
        action_dim: int,
        hidden: int = 256,
    ) -> None:
        self.instructions = list(instructions)
        self.low = np.asarray(proprio_low, np.float64)
        self.high = np.asarray(proprio_high, np.float64)
        self.horizon, self.action_dim = horizon, action_dim
        n_in = len(self.low) + len(self.instructions)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, horizon * action_dim),
        )  # fmt: skip

    def features(self, proprio: np.ndarray, instruction: Sequence[str]) -> torch.Tensor:
        x = 2 * (np.asarray(proprio, np.float64) - self.low) / (self.high - self.low) - 1
        onehot = np.zeros((len(x), len(self.instructions)))
        for i, text in enumerate(instruction):
            if text in self.instructions:
                onehot[i, self.instructions.index(text)] = 1.0
        return torch.as_tensor(np.concatenate([x, onehot], axis=1), dtype=torch.float32)

    @classmethod
    def fit(
        cls, data: str | Path, horizon: int, steps: int = 1500, seed: int = 0, batch_size: int = 256
    ) -> BlindPolicy:
        from blockplan.train.robot_data import chunk_at, data_ranges, episodes_of

        episodes = episodes_of(data, "train")
        ranges = data_ranges(data)
        instructions = sorted({e["instruction"] for e in episodes})
        proprio = np.concatenate([e["proprio"] for e in episodes]).astype(np.float64)
        texts = [e["instruction"] for e in episodes for _ in range(len(e["actions"]))]
        chunks = np.concatenate(
            [
                np.stack([chunk_at(e["actions"], t, horizon) for t in range(len(e["actions"]))])
                for e in episodes
            ]
        )
        D = chunks.shape[-1]
        torch.manual_seed(seed)
        policy = cls(instructions, ranges["proprio_low"], ranges["proprio_high"], horizon, D)
        x = policy.features(proprio, texts)
        y = torch.as_tensor(chunks.reshape(len(chunks), -1), dtype=torch.float32)
        opt = torch.optim.Adam(policy.net.parameters(), lr=1e-3)
        rng = np.random.default_rng(seed)
        for _ in range(steps):
            idx = torch.as_tensor(rng.integers(0, len(x), batch_size))
            loss = torch.nn.functional.mse_loss(policy.net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        policy.net.eval()
        policy.train_loss = float(loss.detach())
        return policy

    @torch.no_grad()
    def chunk(self, proprio: np.ndarray, instruction: str) -> np.ndarray:
        out = self.net(self.features(proprio[None], [instruction]))
        return out.numpy().reshape(self.horizon, self.action_dim).astype(np.float64)


# ---- the episodes ------------------------------------------------------------------------------


def _frames(obs: StepObservation, stamp_ns: int) -> list[CameraFrame]:
    return [CameraFrame(name, stamp_ns, image) for name, image in (obs.frames or {}).items()]


def run_episode(
    env: ManipulationEnv,
    policy: str,
    seed: int,
    act: Callable[[int, int, StepObservation], np.ndarray],
    max_steps: int,
    render_every: int,
    record: bool = False,
) -> EpisodeResult:
    """One episode; `act(step, stamp_ns, observation)` returns the action to apply. With
    `record`, `extra["demonstration"]` holds the run (joints, frames, the applied actions)
    for `robot_bag.write_demo_bag`."""
    # a policy that renders nothing (render_every > max_steps) gets no reset frame either
    obs = env.reset(seed, render=render_every <= max_steps)
    period_ns = round(CONTROL_PERIOD_S * 1e9)
    actions = []
    trace: dict[str, Any] = {"joints": [], "velocities": [], "frames": {}, "actions": []}
    closest = env.task_distance()
    for t in range(max_steps):
        action = np.asarray(act(t, START_NS + t * period_ns, obs), dtype=np.float64)
        actions.append([round(float(a), 4) for a in action])
        if record:
            trace["actions"].append(np.clip(action, -1.0, 1.0))
            trace["joints"].append(obs.joints)
            trace["velocities"].append(obs.joint_velocities)
            if obs.frames is not None:
                trace["frames"][t] = obs.frames
        obs = env.step(action, render=(t + 1) % render_every == 0)
        closest = min(closest, env.task_distance())
        if env.success:
            break
    steps = env.success_step if env.success else max_steps
    result = EpisodeResult(policy, env.spec.name, int(seed), env.success, int(steps), actions)
    # how close a failure came: where the task ended and the closest it got
    result.extra["final_distance_m"] = round(env.task_distance(), 4)
    result.extra["closest_distance_m"] = round(closest, 4)
    if record:
        from blockplan.sim.manipulation import Demonstration

        result.extra["demonstration"] = Demonstration(
            env.spec.name,
            int(seed),
            env.instruction,
            np.asarray(trace["joints"]),
            np.asarray(trace["velocities"]),
            np.asarray(trace["actions"]),
            trace["frames"],
            env.success,
            env.success_step,
        )
    return result


def expert_actor(env: ManipulationEnv) -> Callable:
    return lambda t, stamp, obs: env.expert_action()


def blind_actor(blind: BlindPolicy, instruction: str, replan_steps: int) -> Callable:
    if instruction not in blind.instructions:  # its one-hot would be all zeros: no task at all
        raise UserError(
            f"the blind baseline's data set has no episode with the instruction "
            f"{instruction!r} (it has {blind.instructions}): record demonstrations of the task"
        )
    state: dict[str, Any] = {"chunk": None, "t0": 0}

    def act(t: int, stamp: int, obs: StepObservation) -> np.ndarray:
        if state["chunk"] is None or t - state["t0"] >= replan_steps:
            state["chunk"], state["t0"] = blind.chunk(obs.joints, instruction), t
        return state["chunk"][t - state["t0"]]

    return act


def model_actor(runtime: Any, clock: VirtualClock, instruction: str, record: dict) -> Callable:
    """Feeds the runtime like the node's callbacks would, ticks it once per step."""
    runtime.on_instruction(instruction)

    def act(t: int, stamp: int, obs: StepObservation) -> np.ndarray:
        clock.set(stamp)
        for frame in _frames(obs, stamp):
            runtime.on_frame(frame)
        runtime.on_joint_state(stamp, JOINT_NAMES, obs.joints)
        out = runtime.tick()
        record["ticks"] = record.get("ticks", 0) + 1
        record["fallbacks"] = record.get("fallbacks", 0) + int(out.is_fallback)
        record["chunks"] = record.get("chunks", 0) + len(out.new_chunks)
        for chunk in out.new_chunks:
            record.setdefault("forwards", []).append(chunk.num_forwards)
        return out.action

    return act


def summarize(results: list[EpisodeResult]) -> dict[str, Any]:
    if not results:
        return {}
    failed = [r.extra["final_distance_m"] for r in results if not r.success]
    return {
        "episodes": len(results),
        "success_rate": float(np.mean([r.success for r in results])),
        "mean_steps": float(np.mean([r.steps for r in results])),
        "mean_steps_successful": (
            float(np.mean([r.steps for r in results if r.success]))
            if any(r.success for r in results)
            else None
        ),
        # the failures' final distance to the goal (m): near misses or lost episodes
        "failed_final_distance_m": (
            {"median": float(np.median(failed)), "max": float(np.max(failed))} if failed else None
        ),
    }


def evaluate_robot(
    task: str,
    seeds: Sequence[int],
    policies: Sequence[str],
    planner: Any = None,
    config: Any = None,
    blind: BlindPolicy | None = None,
    max_steps: int = 150,
    render_every: int = 4,
    image_size: int = 64,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every policy on every seed of `task`; returns the JSON of the command."""
    from blockplan.runtime.robot import RobotRuntime

    cameras = tuple(config.camera_names) if config is not None else ("front", "wrist")
    env = ManipulationEnv(task, image_size, cameras)
    out: dict[str, Any] = {
        "task": task,
        "seeds": list(seeds),
        "max_steps": max_steps,
        "render_every": render_every,
        "instruction": env.instruction,
    }
    episodes: list[dict] = []
    try:
        for policy in policies:
            results = []
            started = time.perf_counter()
            record: dict[str, Any] = {}
            for seed in seeds:
                if policy == "expert":
                    act = expert_actor(env)
                elif policy == "blind":
                    assert blind is not None, "the blind baseline needs --data"
                    act = blind_actor(blind, env.instruction, config.robot.replan_steps)
                else:
                    clock = VirtualClock(START_NS)
                    runtime = RobotRuntime(config, planner, clock, timing="ideal")
                    act = model_actor(runtime, clock, env.instruction, record)
                # Only the model looks at the cameras: the others run without rendering.
                every = render_every if policy == "model" else max_steps + 1
                result = run_episode(env, policy, seed, act, max_steps, every)
                if policy == "model":
                    result.extra.update(runtime.metrics())
                    runtime.close()
                results.append(result)
                if progress:
                    progress(
                        f"{policy} seed {seed}: {'success' if result.success else 'failure'} "
                        f"after {result.steps} steps"
                    )
            out[policy] = summarize(results)
            out[policy]["wall_s"] = round(time.perf_counter() - started, 2)
            if policy == "model" and record:
                ticks = max(record.get("ticks", 1), 1)
                out[policy]["fallback_ticks"] = record.get("fallbacks", 0) / ticks
                out[policy]["chunks"] = record.get("chunks", 0)
                out[policy]["forwards_per_chunk"] = float(np.mean(record.get("forwards", [0])))
            episodes += [{k: v for k, v in asdict(r).items() if k != "actions"} for r in results]
    finally:
        env.close()
    out["episodes"] = episodes
    return out
