"""A small robot planner for the engine tests: random weights, a short action chunk."""

from __future__ import annotations

import dataclasses

import torch

from blockplan.config import DecodingConfig, ModelConfig, PlannerConfig
from blockplan.model.planner_model import PlannerModel
from blockplan.model.presets import robot_preset_config
from blockplan.planner.embodiment import robot_config
from blockplan.planner.planner import Planner
from blockplan.schema import default_tokenizer
from blockplan.schema.action import ActionSchema, action_schema_to_dict

SCHEMA = ActionSchema(horizon=4, action_dim=3, num_bins=32, proprio_dim=2, instruction_budget=6)
CONFIG = robot_config(
    PlannerConfig(model=ModelConfig(dtype="float64"), decoding=DecodingConfig(max_denoise_steps=16))
)


def robot_planner(
    seed: int = 0,
    config: PlannerConfig = CONFIG,
    schema: ActionSchema = SCHEMA,
    block_size: int | None = None,
) -> Planner:
    """A `robot-test`-sized planner over `schema` (bins after the default tokenizer)."""
    tokenizer = default_tokenizer()
    schema = dataclasses.replace(schema, bin_token_offset=tokenizer.vocab_size)
    model_config = robot_preset_config(
        "robot-test",
        schema.vocab_size(tokenizer),
        config.camera_names,
        config.frame_window.num_frames,
        block_size=block_size or schema.action_dim,
        schema=action_schema_to_dict(schema),
    )
    torch.manual_seed(seed)
    model = PlannerModel(model_config)
    with torch.no_grad():  # larger weights than the default init: peaked, seed-specific logits
        for p in model.decoder.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    return Planner(model, tokenizer, config)


def with_pipeline(config: PlannerConfig, **pipeline) -> PlannerConfig:
    return dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, **pipeline))
