"""Meta-World manipulation tasks (MuJoCo) for the `robot` embodiment (docs/SIM.md "Robots").

A `ManipulationEnv` wraps one Meta-World v3 task with a seeded layout: `reset(seed)` draws the
object and goal positions from the task's random reset space with `np.random` seeded by
`seed`, so a seed is one reproducible episode and the splits of the data set are disjoint
seed ranges. The robot is Meta-World's Sawyer arm: the action is (dx, dy, dz, grip) in
[-1, 1] — an end-effector position delta of `ACTION_SCALE` m per unit per control step
(`CONTROL_PERIOD_S`, 5 MuJoCo steps of 2.5 ms) and the gripper's effort — and the
proprioceptive state is the 9 joint positions of `/joint_states` (7 arm joints, 2 fingers).

Cameras (`CAMERAS`): `front` is Meta-World's fixed `topview` camera over the table, `wrist`
its `behindGripper` camera, which rides on the hand. Frames are rendered with MuJoCo's own
renderer (`MUJOCO_GL=osmesa` on a machine without a GPU) without shadows and reflections
(about half the software-rendering time, nothing the policy needs), and the goal marker is
drawn with a 3.5 cm radius instead of 1 cm so it covers a few pixels at 64×64 — a rendering change
only: success is Meta-World's own `info["success"]`.

The scripted experts are Meta-World's `metaworld.policies` (they read the full-state
observation, goal included); the learned policies see only the cameras, the joints and the
instruction.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockplan.errors import UserError

os.environ.setdefault("MUJOCO_GL", "osmesa")  # before mujoco is imported (software GL)

CAMERAS: dict[str, str] = {"front": "topview", "wrist": "behindGripper"}
JOINT_NAMES: tuple[str, ...] = (
    "right_j0",
    "right_j1",
    "right_j2",
    "right_j3",
    "right_j4",
    "right_j5",
    "right_j6",
    "r_close",
    "l_close",
)
ACTION_NAMES: tuple[str, ...] = ("dx", "dy", "dz", "grip")
ACTION_SCALE = 0.01  # m of end-effector motion per unit action per control step (Meta-World)
CONTROL_PERIOD_S = 0.0125  # one env step: frame_skip 5 × 2.5 ms
GOAL_MARKER_RADIUS_M = 0.035
# Meta-World's 39-d state: hand (3), gripper (1), object 1 position (3) and quaternion (4),
# object 2 (7), the previous step's 18, the goal position (3)
SCENE_HAND, SCENE_OBJECT, SCENE_GOAL = slice(0, 3), slice(4, 7), slice(36, 39)
MAX_STEPS = 500  # Meta-World's max_path_length


# What `task_distance` measures per task (m), the quantity Meta-World's success test reads
# (success itself is always Meta-World's own `info["success"]`): `tcp` the gripper's centre
# point to the goal, `object` the object to the goal, `object-x` / `object-z` the same along
# one axis only (the door and window handles' x, the button's height), `peg-head` the peg's
# head to the hole with y and z counted twice.
DISTANCES = ("tcp", "object", "object-x", "object-z", "peg-head")


@dataclass(frozen=True)
class TaskSpec:
    name: str  # our short name (the CLI's --task)
    env_name: str  # Meta-World's
    policy: str  # class name in metaworld.policies
    instruction: str
    distance: str = "object"  # what `task_distance` measures (DISTANCES)


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("reach", "reach-v3", "SawyerReachV3Policy", "reach the red goal marker", "tcp"),
        TaskSpec("push", "push-v3", "SawyerPushV3Policy", "push the puck to the green marker"),
        TaskSpec(
            "pick-place",
            "pick-place-v3",
            "SawyerPickPlaceV3Policy",
            "pick up the puck and place it at the blue marker",
        ),
        # the other seven tasks of Meta-World's MT10
        TaskSpec(
            "door-open", "door-open-v3", "SawyerDoorOpenV3Policy", "open the door", "object-x"
        ),
        TaskSpec("drawer-open", "drawer-open-v3", "SawyerDrawerOpenV3Policy", "open the drawer"),
        TaskSpec(
            "drawer-close", "drawer-close-v3", "SawyerDrawerCloseV3Policy", "close the drawer"
        ),
        TaskSpec(
            "button-press-topdown",
            "button-press-topdown-v3",
            "SawyerButtonPressTopdownV3Policy",
            "press the button down from the top",
            "object-z",
        ),
        TaskSpec(
            "peg-insert-side",
            "peg-insert-side-v3",
            "SawyerPegInsertionSideV3Policy",
            "insert the peg into the hole from the side",
            "peg-head",
        ),
        TaskSpec(
            "window-open",
            "window-open-v3",
            "SawyerWindowOpenV3Policy",
            "slide the window open",
            "object-x",
        ),
        TaskSpec(
            "window-close",
            "window-close-v3",
            "SawyerWindowCloseV3Policy",
            "slide the window closed",
            "object-x",
        ),
    )
}
MT10: tuple[str, ...] = tuple(TASKS)  # all ten: Meta-World's MT10


class SimUnavailableError(UserError, RuntimeError):
    """Meta-World / MuJoCo are not installed (the `sim` extra) or cannot render."""


def task_spec(name: str) -> TaskSpec:
    if name not in TASKS:
        raise UserError(f"task={name!r}: must be one of {sorted(TASKS)}")
    return TASKS[name]


def _import_metaworld() -> Any:
    try:
        import metaworld
        import metaworld.policies
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SimUnavailableError(
            f"Meta-World is not installed ({e}); pip install 'blockplan[sim]' "
            "(and Debian's libosmesa6 for rendering without a GPU)"
        ) from e
    return ALL_V3_ENVIRONMENTS, metaworld.policies


@dataclass
class StepObservation:
    """What one control step exposes: the joints always, frames when rendered."""

    step: int
    joints: np.ndarray  # (9,) float64, JOINT_NAMES order
    joint_velocities: np.ndarray  # (9,)
    frames: dict[str, np.ndarray] | None  # camera -> (H, W, 3) uint8, None if not rendered
    state: np.ndarray  # Meta-World's 39-d full-state observation (for the expert only)


class ManipulationEnv:
    """One Meta-World task, seeded per episode, with the blockplan cameras."""

    def __init__(
        self, task: str, image_size: int = 64, cameras: tuple[str, ...] = ("front", "wrist")
    ) -> None:
        self.spec = task_spec(task)
        envs, policies = _import_metaworld()
        import mujoco

        self._mujoco = mujoco
        self.env = envs[self.spec.env_name]()
        self.env._freeze_rand_vec = False
        self.env.seeded_rand_vec = True
        self.env._set_task_called = True  # the layout comes from the seed, not a Task
        self.env._partially_observable = False  # the expert needs the goal in its state
        self.env.__dict__.pop("sawyer_observation_space", None)
        self.expert = getattr(policies, self.spec.policy)()
        # button-press-topdown has no goal marker (its goal is the pressed button's height)
        sites = {self.env.model.site(i).name for i in range(self.env.model.nsite)}
        if "goal" in sites:
            self.env.model.site("goal").size[:] = GOAL_MARKER_RADIUS_M
        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown:
            raise UserError(f"camera {unknown[0]!r}: must be one of {sorted(CAMERAS)}")
        self.cameras = tuple(cameras)
        self.image_size = int(image_size)
        self._renderer: Any = None
        self._state: np.ndarray | None = None
        self.step_index = 0
        self.success = False
        self.success_step: int | None = None
        period = self.env.frame_skip * self.env.model.opt.timestep
        if (
            abs(period - CONTROL_PERIOD_S) > 1e-9
            or abs(self.env.action_scale - ACTION_SCALE) > 1e-12
        ):
            raise SimUnavailableError(
                f"Meta-World's step is {period} s and its action scale {self.env.action_scale}; "
                f"this module assumes {CONTROL_PERIOD_S} s and {ACTION_SCALE}"
            )
        qpos_names = [self.env.model.joint(i).name for i in range(len(JOINT_NAMES))]
        if tuple(qpos_names) != JOINT_NAMES:
            raise SimUnavailableError(f"unexpected joints {qpos_names}")

    @property
    def instruction(self) -> str:
        return self.spec.instruction

    def reset(self, seed: int, render: bool = True) -> StepObservation:
        self.env.seed(int(seed))
        self.env.reset()
        # Meta-World moves the goal site after its last forward pass: without one, the reset
        # frame would draw the marker where the previous layout had it. The articulated tasks
        # (door, drawer, button, peg's box, window) also move their body after it, so the
        # state it returned holds that object where an earlier draw put it: read it again.
        self._mujoco.mj_forward(self.env.model, self.env.data)
        self.env._prev_obs = self.env._get_curr_obs_combined_no_goal()
        self._state = np.asarray(self.env._get_obs(), dtype=np.float64)
        self.step_index = 0
        self.success, self.success_step = False, None
        return self.observe(render)

    def observe(self, render: bool) -> StepObservation:
        data = self.env.data
        joints = np.array(data.qpos[: len(JOINT_NAMES)], dtype=np.float64)
        velocities = np.array(data.qvel[: len(JOINT_NAMES)], dtype=np.float64)
        frames = self.render() if render else None
        assert self._state is not None
        return StepObservation(self.step_index, joints, velocities, frames, self._state.copy())

    def render(self) -> dict[str, np.ndarray]:
        mujoco = self._mujoco
        if self._renderer is None:
            try:
                self._renderer = mujoco.Renderer(self.env.model, self.image_size, self.image_size)
            except Exception as e:  # GL back ends fail in many ways
                raise SimUnavailableError(
                    f"MuJoCo cannot render ({e}); set MUJOCO_GL=osmesa and install libosmesa6"
                ) from e
        out = {}
        for name in self.cameras:
            self._renderer.update_scene(self.env.data, camera=CAMERAS[name])
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            out[name] = np.array(self._renderer.render(), dtype=np.uint8)
        return out

    def task_distance(self) -> float:
        """What the task's success is judged on (m), as Meta-World measures it (the spec's
        `distance`, DISTANCES): the gripper's centre point to the goal for reach (success
        within 5 cm); the object to the goal for push (5 cm), pick-place (7 cm), drawer-open
        (3 cm) and drawer-close (6.5 cm); the handle's x to the goal's for door-open (8 cm),
        window-open and window-close (5 cm); the button's height above the pressed height for
        button-press-topdown (2.4 cm); the peg's head to the hole, y and z doubled, for
        peg-insert-side (7 cm). Success itself is Meta-World's `info["success"]`."""
        assert self._state is not None
        goal = self._state[SCENE_GOAL]
        obj = self._state[SCENE_OBJECT]
        kind = self.spec.distance
        if kind == "tcp":
            return float(np.linalg.norm(np.asarray(self.env.tcp_center) - goal))
        if kind == "object-x":
            return float(abs(obj[0] - goal[0]))
        if kind == "object-z":
            return float(abs(obj[2] - goal[2]))
        if kind == "peg-head":
            head = np.asarray(self.env._get_site_pos("pegHead"))
            return float(np.linalg.norm((head - goal) * np.array([1.0, 2.0, 2.0])))
        return float(np.linalg.norm(obj - goal))

    def expert_action(self) -> np.ndarray:
        assert self._state is not None
        return np.clip(np.asarray(self.expert.get_action(self._state), np.float64), -1.0, 1.0)

    def step(self, action: np.ndarray, render: bool) -> StepObservation:
        """Apply one action (clipped to [-1, 1]); records success at the first success."""
        action = np.asarray(action, dtype=np.float64).reshape(len(ACTION_NAMES))
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action {action}: not finite")
        if self.step_index >= MAX_STEPS:
            raise UserError(f"episode is over ({MAX_STEPS} steps)")
        state, _, _, _, info = self.env.step(np.clip(action, -1.0, 1.0).astype(np.float32))
        self._state = state
        self.step_index += 1
        if info.get("success") and not self.success:
            self.success, self.success_step = True, self.step_index
        return self.observe(render)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.env.close()


@dataclass
class Demonstration:
    task: str
    seed: int
    instruction: str
    joints: np.ndarray  # (T, 9)
    joint_velocities: np.ndarray  # (T, 9)
    actions: np.ndarray  # (T, 4)
    frames: dict[int, dict[str, np.ndarray]]  # step -> camera -> image (rendered steps only)
    success: bool
    success_step: int | None
    # (T, 9) the object's, the goal's and the hand's positions (world, m) per step, from the
    # simulator's state: privileged, recorded as training targets (None: not recorded)
    scene: np.ndarray | None = None


def scene_of(state: np.ndarray) -> np.ndarray:
    """(9,) the object's, the goal's and the hand's positions from Meta-World's 39-d state.
    The object is the task's first one: the puck, the door or window handle, the drawer's
    handle, the button's top, the peg's grasp point; the goal Meta-World's target, a point
    of which only x counts for the door and the windows and only z for the button."""
    parts = (state[SCENE_OBJECT], state[SCENE_GOAL], state[SCENE_HAND])
    return np.concatenate(parts).astype(np.float64)


def run_expert(
    env: ManipulationEnv,
    seed: int,
    render_every: int = 4,
    max_steps: int = 200,
    tail: int = 8,
    action_noise: float = 0.0,
) -> Demonstration:
    """One scripted-expert episode: until `tail` steps after the first success (or
    `max_steps`); frames at every `render_every`-th step.

    `action_noise` > 0 (noise injection, as in DART): the arm executes the expert's action
    plus Gaussian noise of that standard deviation on the end-effector deltas (not the
    gripper), while the demonstration records the expert's clean action at every state it
    reaches. The states drift off the expert's own path the way a learned policy's do, and
    each is labelled with how the expert gets back. The noise is seeded by `seed`."""
    if action_noise < 0:
        raise ValueError(f"action_noise={action_noise}: must be >= 0")
    rng = np.random.default_rng([int(seed), 0xDA27])
    obs = env.reset(seed)
    joints, velocities, actions, frames, scene = [], [], [], {}, []
    end = max_steps
    for t in range(max_steps):
        if obs.frames is not None:
            frames[t] = obs.frames
        action = env.expert_action()
        scene.append(scene_of(obs.state))
        joints.append(obs.joints)
        velocities.append(obs.joint_velocities)
        actions.append(action)
        if t + 1 >= end:
            break
        executed = action
        if action_noise > 0:
            executed = action.copy()
            executed[:-1] += rng.normal(0.0, action_noise, len(action) - 1)
        obs = env.step(executed, render=(t + 1) % render_every == 0)
        if env.success and end == max_steps:
            end = min(max_steps, t + 1 + tail)
    return Demonstration(
        env.spec.name,
        int(seed),
        env.instruction,
        np.asarray(joints),
        np.asarray(velocities),
        np.asarray(actions),
        frames,
        env.success,
        env.success_step,
        np.asarray(scene),
    )


def seeds_of(split: str, count: int) -> Iterator[int]:
    """The seeds of a split: train 0…, val 100000…, test 200000… (closed-loop evaluations use
    seeds of their own, e.g. 900000…)."""
    base = {"train": 0, "val": 100_000, "test": 200_000}[split]
    return iter(range(base, base + count))
