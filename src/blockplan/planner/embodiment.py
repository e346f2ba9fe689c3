"""What differs between the embodiments (docs/DESIGN.md §1) on the engine's side: the answer
format a `Planner` decodes against — its scaffold, constraints, prompt, strict parser, plan
type and synthetic inputs. The engine itself (block loop, strategies, cache) is the same.

* `DrivingFormat` (`vehicle`): the driving schema (docs/SCHEMA.md), a `Plan` of waypoints.
* `ActionFormat` (`robot`): the action schema (`schema/action/`), an `ActionPlan` of an
  (H, D) action chunk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from blockplan.config import DEFAULT_CAMERA_TOPIC, CameraConfig, PlannerConfig
from blockplan.decoding.constraints import (
    AnswerConstraints,
    build_action_constraints,
    build_constraints,
)
from blockplan.planner.synthetic import synthetic_observation, synthetic_robot_observation
from blockplan.schema import (
    DrivingSchema,
    PromptLayout,
    Scaffold,
    Tokenizer,
    compile_scaffold,
    parse_answer,
    render_prompt,
)
from blockplan.schema.action import (
    ROBOT_CAMERAS,
    ActionChunk,
    ActionSchema,
    compile_action_scaffold,
    parse_actions,
    render_robot_prompt,
)
from blockplan.types import (
    ActionPlan,
    DrivingAnswer,
    Observation,
    Plan,
    RobotObservation,
)

# Strategies `blockplan bench` runs on a robot model by default (the comparison).
ROBOT_BENCH_STRATEGIES = ("ar", "full_diffusion", "section_diffusion", "pipelined")


class AnswerFormat(Protocol):
    """The schema-specific half of a `Planner`."""

    embodiment: str

    def scaffold(self, tokenizer: Tokenizer, block_size: int) -> Scaffold: ...

    def constraints(
        self, scaffold: Scaffold, tokenizer: Tokenizer, vocab_size: int
    ) -> AnswerConstraints: ...

    def render(self, observation: Any, tokenizer: Tokenizer, model_config: Any) -> PromptLayout:
        """The prompt of `observation` (None: the template of the same length)."""
        ...

    def parse(self, tokens: np.ndarray, scaffold: Scaffold, tokenizer: Tokenizer) -> Any:
        """Strictly parse one answer row; raises `ScaffoldParseError`."""
        ...

    def make_plan(
        self, stamp_ns: int, parsed: Sequence[Any], timings: dict[str, float], num_forwards: int
    ) -> Plan | ActionPlan: ...

    def synthetic(self, config: PlannerConfig, seed: int) -> Observation | RobotObservation: ...


@dataclasses.dataclass(frozen=True)
class DrivingFormat:
    schema: DrivingSchema
    embodiment: str = "vehicle"

    def scaffold(self, tokenizer: Tokenizer, block_size: int) -> Scaffold:
        return compile_scaffold(self.schema, tokenizer, block_size)

    def constraints(
        self, scaffold: Scaffold, tokenizer: Tokenizer, vocab_size: int
    ) -> AnswerConstraints:
        return build_constraints(scaffold, self.schema, tokenizer, vocab_size)

    def render(self, observation: Any, tokenizer: Tokenizer, model_config: Any) -> PromptLayout:
        mc = model_config
        return render_prompt(
            observation,
            tokenizer,
            self.schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
            ego_tokens=getattr(mc, "ego_tokens", 0),
        )

    def parse(self, tokens: np.ndarray, scaffold: Scaffold, tokenizer: Tokenizer) -> DrivingAnswer:
        return parse_answer(tokens, scaffold, tokenizer, self.schema)

    def make_plan(
        self,
        stamp_ns: int,
        parsed: Sequence[DrivingAnswer],
        timings: dict[str, float],
        num_forwards: int,
    ) -> Plan:
        return Plan(
            stamp_ns=stamp_ns,
            answer=parsed[0],
            rollouts=np.stack([a.waypoints for a in parsed]),  # (N, 5, 2)
            timings_ms=timings,
            num_forwards=num_forwards,
        )

    def synthetic(self, config: PlannerConfig, seed: int) -> Observation:
        return synthetic_observation(config, seed=seed, schema=self.schema)


@dataclasses.dataclass(frozen=True)
class ActionFormat:
    schema: ActionSchema
    embodiment: str = "robot"

    def scaffold(self, tokenizer: Tokenizer, block_size: int) -> Scaffold:
        return compile_action_scaffold(self.schema, tokenizer, block_size)

    def constraints(
        self, scaffold: Scaffold, tokenizer: Tokenizer, vocab_size: int
    ) -> AnswerConstraints:
        return build_action_constraints(scaffold, self.schema, tokenizer, vocab_size)

    def render(self, observation: Any, tokenizer: Tokenizer, model_config: Any) -> PromptLayout:
        if observation is not None and not isinstance(observation, RobotObservation):
            raise TypeError(
                f"a robot planner takes a RobotObservation, got {type(observation).__name__}"
            )
        mc = model_config
        return render_robot_prompt(
            observation,
            tokenizer,
            self.schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
        )

    def parse(self, tokens: np.ndarray, scaffold: Scaffold, tokenizer: Tokenizer) -> ActionChunk:
        return parse_actions(tokens, scaffold, tokenizer, self.schema)

    def make_plan(
        self,
        stamp_ns: int,
        parsed: Sequence[ActionChunk],
        timings: dict[str, float],
        num_forwards: int,
    ) -> ActionPlan:
        return ActionPlan(
            stamp_ns=stamp_ns,
            actions=parsed[0].values,
            bins=parsed[0].bins,
            rollouts=np.stack([c.values for c in parsed]),  # (N, H, D)
            timings_ms=timings,
            num_forwards=num_forwards,
        )

    def synthetic(self, config: PlannerConfig, seed: int) -> RobotObservation:
        return synthetic_robot_observation(config, seed, self.schema)


def answer_format(schema: DrivingSchema | ActionSchema) -> DrivingFormat | ActionFormat:
    """The answer format of a schema."""
    if isinstance(schema, ActionSchema):
        return ActionFormat(schema)
    return DrivingFormat(schema)


def robot_config(
    config: PlannerConfig | None = None,
    camera_names: Sequence[str] = ROBOT_CAMERAS,
    num_frames: int = 1,
) -> PlannerConfig:
    """`config` (default: the defaults) for a robot model: `model.embodiment: robot`, its
    cameras (default topics, raw) and frames per camera."""
    config = config or PlannerConfig()
    cameras = tuple(
        next(
            (c for c in config.cameras if c.name == name),
            CameraConfig(name=name, topic=DEFAULT_CAMERA_TOPIC.format(name=name)),
        )
        for name in camera_names
    )
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, embodiment="robot"),
        cameras=cameras,
        frame_window=dataclasses.replace(config.frame_window, num_frames=num_frames),
    )


__all__ = [
    "ROBOT_BENCH_STRATEGIES",
    "ActionFormat",
    "AnswerFormat",
    "DrivingFormat",
    "answer_format",
    "robot_config",
]
