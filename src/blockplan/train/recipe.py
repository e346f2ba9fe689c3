"""What a training run builds: the schema, the tokenizer, the scaffold and the model config.

Architectures by name: `reference` (the shipped model: ~0.9 M parameters, 6 visual tokens per
image at 48x80, sized so a training step is fast on a 2-core CPU, with the exactly streamable
visual layout: frame-local visual attention and no frame-slot embedding) and the model
package's presets (`tiny`, `test`, and their `-stream` variants). The reference schema keeps the default answer but a shorter prompt
(a one-line system text, 3 history rows = 1 s), which is most of the sequence length.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.ego import EgoEncoderConfig
from blockplan.model.planner_model import PlannerModelConfig
from blockplan.model.presets import PRESETS, VISION_PRESETS, schema_to_dict
from blockplan.model.vision import VisionConfig
from blockplan.schema import (
    DEFAULT_BLOCK_SIZE,
    DrivingSchema,
    PromptLayout,
    Scaffold,
    Tokenizer,
    compile_scaffold,
    default_schema,
    default_tokenizer,
    render_prompt,
)

# Two wide heads: on CPU the (B, H, S, S) attention maps, not the matrices, bound a step.
REFERENCE_DECODER = dict(
    hidden_size=128,
    intermediate_size=344,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    tie_word_embeddings=True,
)
REFERENCE_VISION = VisionConfig(image_height=48, image_width=80, channels=(8, 16, 32), grid=(2, 3))
MIN_STD_M = 0.25  # the smallest waypoint deviation the flow head normalises by
REFERENCE_SYSTEM_TEXT = "You are the planner of an autonomous vehicle. Answer in JSON."

# name -> (decoder settings, vision config, exactly streamable visual layout)
ARCHS: dict[str, tuple[dict, VisionConfig, bool]] = {
    "reference": (REFERENCE_DECODER, REFERENCE_VISION, True),
    **{name: (PRESETS[name], VISION_PRESETS[name], False) for name in PRESETS},
    **{f"{name}-stream": (PRESETS[name], VISION_PRESETS[name], True) for name in PRESETS},
}


def reference_schema() -> DrivingSchema:
    """The default answer schema with the short reference prompt."""
    return dataclasses.replace(default_schema(), num_history=3, system_text=REFERENCE_SYSTEM_TEXT)


@dataclass(frozen=True)
class Recipe:
    """Schema + tokenizer + model config of one training run (also what eval needs)."""

    model_config: PlannerModelConfig
    schema: DrivingSchema
    tokenizer: Tokenizer

    @classmethod
    def build(
        cls,
        arch: str,
        camera_names: tuple[str, ...],
        num_frames: int,
        schema: DrivingSchema | None = None,
        tokenizer: Tokenizer | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        frame_period_s: float | None = None,
        trajectory_head: str = "tokens",
        ego_tokens: int = 0,
        vision_grid: tuple[int, int] | None = None,
        ego_lane_pose: bool = False,
        image_size: tuple[int, int] | None = None,
        vision_keypoints: int = 0,
        vision_scene: int = 0,
        vision_scene_reads: str = "cells",
        ego_scene: bool = False,
        ego_lead: bool = False,
        ego_beside: bool = False,
        ego_route: bool = False,
    ) -> Recipe:
        """`frame_period_s`: the training frames' spacing, recorded in config.json (the
        runtime refuses a frame window of another spacing). `trajectory_head`: `tokens` or
        `flow` (docs/ALGORITHMS.md §7.1; `with_flow_statistics` sets its normalisation).
        `ego_tokens` > 0: a numeric ego encoder fills that many prompt slots with the ego
        history instead of writing it as digits (model/ego.py); `ego_lane_pose`: the
        encoder also reads the lane pose at t0. `vision_grid`: (rows, cols)
        of visual tokens per image instead of the arch's (the same encoder, pooled finer or
        coarser); `image_size`: (height, width) of the tower's input instead of the arch's;
        `vision_keypoints`, `vision_scene`: spatial-softmax keypoints and a scene token of
        that many numbers per image (docs/ALGORITHMS.md §3.5); `ego_scene`: the ego encoder
        also reads the front camera's newest scene token; `ego_lead`: the car ahead (gap,
        speed; §3.6); `ego_beside`: the lanes beside (lane count, cars; §3.7); `ego_route`:
        the route ahead (§3.8)."""
        if arch not in ARCHS:
            raise ModelConfigError(f"arch={arch!r}: must be one of {sorted(ARCHS)}")
        decoder_kw, vision, streamable = ARCHS[arch]
        if vision_grid is not None:
            vision = dataclasses.replace(vision, grid=tuple(vision_grid))
        if image_size is not None:
            height, width = image_size
            vision = dataclasses.replace(vision, image_height=height, image_width=width)
        if vision_keypoints or vision_scene:
            vision = dataclasses.replace(
                vision,
                keypoints=vision_keypoints,
                scene=vision_scene,
                scene_reads=vision_scene_reads,
            )
        tokenizer = tokenizer or default_tokenizer()
        schema = schema or reference_schema()
        decoder = DecoderConfig(
            vocab_size=tokenizer.vocab_size, max_position_embeddings=2048, **decoder_kw
        )
        config = PlannerModelConfig(
            decoder=decoder,
            vision=vision,
            camera_names=tuple(camera_names),
            num_frames=num_frames,
            block_size=block_size,
            schema=schema_to_dict(schema),
            visual_attention="frame_only" if streamable else "frame_and_header",
            frame_slot_embedding=not streamable,
            frame_period_s=frame_period_s,
            trajectory_head=trajectory_head,
            ego_encoder=EgoEncoderConfig(
                tokens=ego_tokens,
                rows=schema.num_history,
                lane_pose=ego_lane_pose,
                scene=ego_scene,
                lead=ego_lead,
                beside=ego_beside,
                route=ego_route,
            )
            if ego_tokens
            else None,
        )
        return cls(config, schema, tokenizer)

    def with_flow_statistics(self, future_xy: np.ndarray) -> Recipe:
        """The recipe with the flow head normalising waypoints by the mean and standard
        deviation of the training targets (future_xy (N, 20, 2) at 4 Hz: waypoints every
        4th); a token-head recipe is returned unchanged. Deviations below `MIN_STD_M` are
        raised to it (a coordinate that barely varies would otherwise be amplified)."""
        mc = self.model_config
        if mc.trajectory_head != "flow":
            return self
        waypoints = np.asarray(future_xy, dtype=np.float64)[:, 3::4].reshape(-1, 10)
        mean = [round(float(v), 4) for v in waypoints.mean(axis=0)]
        std = [round(float(max(v, MIN_STD_M)), 4) for v in waypoints.std(axis=0)]
        head = dataclasses.replace(mc.flow_head, waypoint_mean=tuple(mean), waypoint_std=tuple(std))
        return dataclasses.replace(self, model_config=dataclasses.replace(mc, flow_head=head))

    @cached_property
    def scaffold(self) -> Scaffold:
        return compile_scaffold(self.schema, self.tokenizer, self.model_config.block_size)

    @cached_property
    def template(self) -> PromptLayout:
        """The prompt layout every sample shares (fixed length, fixed image spans)."""
        mc = self.model_config
        return render_prompt(
            None,
            self.tokenizer,
            self.schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
            ego_tokens=mc.ego_tokens,
        )
