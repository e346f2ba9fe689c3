"""`QwenPlannerModel`: a Qwen2.5-VL network (Fast-dVLM / Fast-dDrive) in the planner's seat.

The engine's `Planner` drives a model through a small surface: `config` (decoder, cameras,
frames, tokens per image, block size, schema, visual attention), `visual` (`preprocess` of one
uint8 frame and a batched forward to visual tokens), `embed_prompt`, `prompt_positions` and
the decoder forward. This adapter gives a `QwenVLModel` that surface:

* every frame is resized to one fixed `image_size` (multiples of 28), so each image has
  (h/28)·(w/28) visual tokens and the prompt layout is the same every tick;
* the prompt attends causally (as Qwen2.5-VL was trained), no frame-local mask, so the
  streaming K/V reuse does not apply (the planner keeps it off);
* positions are multimodal RoPE (`rope.mrope_positions`), the answer continues after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.positions import PromptPositions
from blockplan.model.qwen2_5_vl.model import QwenVLModel
from blockplan.model.qwen2_5_vl.preprocess import preprocess_image
from blockplan.model.qwen2_5_vl.rope import mrope_positions
from blockplan.schema.layout import DEFAULT_BLOCK_SIZE, ImageSpan, PromptLayout

DEFAULT_IMAGE_SIZE = (448, 448)  # 16 x 16 = 256 visual tokens per image


@dataclass(frozen=True)
class QwenPlannerConfig:
    decoder: DecoderConfig
    camera_names: tuple[str, ...]
    num_frames: int
    image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE  # (height, width) px, multiples of 28
    block_size: int = DEFAULT_BLOCK_SIZE
    schema: dict[str, Any] = field(default_factory=dict)
    factor: int = 28  # patch_size * spatial_merge_size

    # The surface the Planner reads on every model config (model/planner_model.py):
    visual_attention = "causal"
    frame_slot_embedding = False
    streams_exactly = False
    embodiment = "vehicle"
    cache_attention = "causal"  # Fast-dDrive's SASD stream
    frame_period_s = None  # not recorded in a transformers folder: the runtime's config holds
    exportable = False  # the torch backend only (no static-shape export of its ViT / mRoPE)
    can_stream = False  # its prompt attends causally across frames: nothing to reuse exactly

    def __post_init__(self) -> None:
        h, w = self.image_size
        if h < self.factor or w < self.factor or h % self.factor or w % self.factor:
            raise ModelConfigError(
                f"image_size={list(self.image_size)}: sides must be positive multiples of "
                f"{self.factor}"
            )
        if not self.camera_names:
            raise ModelConfigError("camera_names=(): at least one camera is required")
        if self.num_frames < 1 or self.block_size < 1:
            raise ModelConfigError(
                f"num_frames={self.num_frames}, block_size={self.block_size}: must be >= 1"
            )

    @property
    def grid(self) -> tuple[int, int]:
        """Merged visual tokens per image side (rows, columns)."""
        return self.image_size[0] // self.factor, self.image_size[1] // self.factor

    @property
    def tokens_per_image(self) -> int:
        return self.grid[0] * self.grid[1]


class QwenFrameEncoder(nn.Module):
    """The planner's `visual`: uint8 frames → patches → visual tokens of a fixed size."""

    def __init__(self, vit: nn.Module, image_size: tuple[int, int]) -> None:
        super().__init__()
        self.vit = vit
        self.image_size = image_size

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (N, H, W, 3) → float32 patches (N, S, 1176) at `image_size`."""
        config = self.vit.config
        return torch.stack([preprocess_image(im, config, self.image_size) for im in images])

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """patches (N, S, 1176) → visual tokens (N, G, W)."""
        patch = self.vit.config.patch_size
        grid = (self.image_size[0] // patch, self.image_size[1] // patch)
        dtype = self.vit.patch_embed.proj.weight.dtype
        return self.vit(patches.to(dtype), grid)


class QwenPlannerModel(nn.Module):
    def __init__(self, net: QwenVLModel, config: QwenPlannerConfig) -> None:
        super().__init__()
        if config.decoder != net.config.decoder:
            raise ModelConfigError("QwenPlannerConfig.decoder differs from the network's")
        self.net = net
        self.config = config
        self.visual = QwenFrameEncoder(net.visual, config.image_size)

    @property
    def decoder(self) -> nn.Module:
        return self.net.decoder

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.config.decoder

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        return self.net.decoder(input_ids, **kwargs)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.net.embed(input_ids)

    def embed_prompt(
        self,
        token_ids: torch.Tensor,  # (P,) with <|image_pad|> at visual positions
        image_spans: tuple[ImageSpan, ...],
        visual: torch.Tensor,  # (K*T, G, W) view-major
    ) -> torch.Tensor:
        """Prompt embeddings (1, P, W) with each span's pads replaced by its image's tokens."""
        embeds = self.embed(token_ids[None]).clone()  # (1, P, W)
        T = self.config.num_frames
        for span in image_spans:
            if span.end - span.start != visual.shape[1]:
                raise ValueError(
                    f"image span {span}: {span.end - span.start} slots, the model makes "
                    f"{visual.shape[1]} tokens per image"
                )
            embeds[0, span.start : span.end] = visual[span.camera_index * T + span.frame_index]
        return embeds

    def prompt_positions(self, layout: PromptLayout) -> PromptPositions:
        """Multimodal RoPE positions of the prompt and where the answer continues."""
        spans = [(s.start, s.end) for s in layout.image_spans]
        rope = mrope_positions(len(layout), spans, [self.config.grid] * len(spans))
        return PromptPositions(rope.positions, rope.next_position)

    def num_parameters(self) -> int:
        return self.net.num_parameters()
