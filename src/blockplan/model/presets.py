"""Named model sizes for `Planner.random_init` and training from scratch."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.planner_model import PlannerModelConfig
from blockplan.model.vision import VisionConfig
from blockplan.schema.layout import DEFAULT_BLOCK_SIZE

# Decoder sizes; the vocabulary comes from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    # ~3 M parameters: the reference-model size, runs a plan in well under a second on CPU.
    "tiny": dict(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    # ~0.1 M parameters, for unit tests.
    "test": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
}

VISION_PRESETS: dict[str, VisionConfig] = {
    "tiny": VisionConfig(image_height=72, image_width=128, channels=(16, 32, 64), grid=(4, 4)),
    "test": VisionConfig(image_height=16, image_width=24, channels=(4, 8), grid=(2, 2)),
}


# "<size>-stream" (e.g. `tiny-stream`): the same size with the exactly streamable layout —
# visual tokens attend to their own frame only and carry no frame-slot embedding, so a
# frame's cached K/V are exact in whatever slot the sliding window puts it (DECODING.md).
STREAM_SUFFIX = "-stream"


# "<preset>-flow" (e.g. `tiny-flow`): that preset with the flow-matching trajectory head
# (docs/ALGORITHMS.md §7.1) at its default size.
FLOW_SUFFIX = "-flow"


def preset_names() -> list[str]:
    """Every preset name `preset_config` accepts."""
    base = [*PRESETS, *(name + STREAM_SUFFIX for name in PRESETS)]
    return sorted([*base, *(name + FLOW_SUFFIX for name in base)])


def preset_config(
    preset: str,
    vocab_size: int,
    camera_names: tuple[str, ...],
    num_frames: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    schema: Any = None,
    max_position_embeddings: int = 4096,
) -> PlannerModelConfig:
    """A `PlannerModelConfig` of a named size; `schema` (a DrivingSchema) is recorded."""
    if preset not in preset_names():
        raise ModelConfigError(f"preset={preset!r}: must be one of {preset_names()}")
    head = "flow" if preset.endswith(FLOW_SUFFIX) else "tokens"
    preset = preset.removesuffix(FLOW_SUFFIX)
    streaming = preset.endswith(STREAM_SUFFIX)
    size = preset.removesuffix(STREAM_SUFFIX)
    decoder = DecoderConfig(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings,
        **(ROBOT_PRESETS[size] if size in ROBOT_PRESETS else PRESETS[size]),
    )
    return PlannerModelConfig(
        decoder=decoder,
        vision=VISION_PRESETS[size],
        camera_names=tuple(camera_names),
        num_frames=num_frames,
        block_size=block_size,
        schema=schema_to_dict(schema) if schema is not None else {},
        visual_attention="frame_only" if streaming else "frame_and_header",
        frame_slot_embedding=not streaming,
        trajectory_head=head,
    )


def schema_to_dict(schema: Any) -> dict[str, Any]:
    """A DrivingSchema as JSON-able settings (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(schema).items()}


# "robot-<size>" (e.g. `robot-tiny`): the same decoder sizes for the robot embodiment, with
# square camera images (a fixed view and a wrist camera, docs/SCHEMA.md "The action schema").
ROBOT_PREFIX = "robot-"
# Robot-only decoder sizes: `small` (~0.9 M parameters, the reference driving model's
# decoder) is the shipped `models/blockplan-robot-tiny`'s, a few MB on disk.
ROBOT_PRESETS: dict[str, dict[str, Any]] = {
    "small": dict(
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    ),
}
ROBOT_VISION_PRESETS: dict[str, VisionConfig] = {
    "tiny": VisionConfig(image_height=64, image_width=64, channels=(16, 32, 64), grid=(4, 4)),
    "small": VisionConfig(image_height=64, image_width=64, channels=(16, 32, 64), grid=(4, 4)),
    "test": VisionConfig(image_height=16, image_width=16, channels=(4, 8), grid=(2, 2)),
}


def robot_preset_names() -> list[str]:
    """Every preset name `robot_preset_config` accepts."""
    return sorted(ROBOT_PREFIX + name for name in (*PRESETS, *ROBOT_PRESETS))


def robot_preset_config(
    preset: str,
    vocab_size: int,
    camera_names: tuple[str, ...],
    num_frames: int,
    block_size: int,
    schema: dict[str, Any],
    max_position_embeddings: int = 4096,
) -> PlannerModelConfig:
    """A robot `PlannerModelConfig` of a named size; `schema` is the action schema as a dict
    (`action_schema_to_dict`) and `vocab_size` covers the tokenizer and the bin tokens."""
    if preset not in robot_preset_names():
        raise ModelConfigError(f"preset={preset!r}: must be one of {robot_preset_names()}")
    size = preset.removeprefix(ROBOT_PREFIX)
    decoder = DecoderConfig(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings,
        **(ROBOT_PRESETS[size] if size in ROBOT_PRESETS else PRESETS[size]),
    )
    return PlannerModelConfig(
        decoder=decoder,
        vision=ROBOT_VISION_PRESETS[size],
        camera_names=tuple(camera_names),
        num_frames=num_frames,
        block_size=block_size,
        schema=dict(schema),
        embodiment="robot",
    )
