"""`robot.*`: the robot embodiment's runtime and node."""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config.fields import _check, _check_fields, signed

SAWYER_JOINTS = "right_j0,right_j1,right_j2,right_j3,right_j4,right_j5,right_j6,r_close,l_close"


@dataclass(frozen=True)
class RobotConfig:
    """The robot embodiment's runtime and node (`model.embodiment: robot`; docs/RUNTIME.md
    "Robots"). A chunk's step k applies at its observation's stamp + k·chunk_period_s; each
    control tick publishes the step of the newest chunk that matches the tick's time (chunk
    stitching), a new chunk is requested once `replan_steps` steps of the newest have
    started (receding horizon), and without a usable chunk the command holds position (zero
    velocity, the gripper as last commanded)."""

    joint_names: str = SAWYER_JOINTS  # comma-separated: the proprioceptive state's order
    instruction: str = ""  # used until the instruction topic has a message
    chunk_period_s: float = signed(0.0125, "> 0")  # the data set's control period
    replan_steps: int = 2
    # > 0: each step's action is the weighted mean over every recent chunk that covers it,
    # weight exp(-m·i) with i = 0 the oldest (ACT's temporal ensembling); 0: the newest only
    temporal_ensemble: float = signed(0.0, ">= 0")
    max_joint_state_age_s: float = signed(0.2, "> 0")
    # m/s end-effector velocity per action unit (Meta-World)
    velocity_per_unit: float = signed(0.8, "> 0")
    command_frame: str = "world"
    joint_states_topic: str = "/joint_states"
    instruction_topic: str = "/instruction"
    twist_topic: str = "/servo_node/delta_twist_cmds"
    gripper_topic: str = "/gripper/command"
    chunk_topic: str = "/planning/action_chunk"

    def __post_init__(self) -> None:
        names = self.joint_name_list
        _check(
            bool(names) and all(names),
            "robot.joint_names",
            self.joint_names,
            "must be a comma-separated list of joint names",
        )
        _check(
            len(set(names)) == len(names),
            "robot.joint_names",
            self.joint_names,
            "names must be unique",
        )
        _check(self.replan_steps >= 1, "robot.replan_steps", self.replan_steps, "must be >= 1")
        _check_fields(self, "robot")
        for name in ("joint_states", "instruction", "twist", "gripper", "chunk"):
            value = getattr(self, f"{name}_topic")
            _check(value.startswith("/"), f"robot.{name}_topic", value, "must be absolute")

    @property
    def joint_name_list(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.joint_names.split(","))
