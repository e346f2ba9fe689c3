"""Camera images → visual tokens in the decoder's width.

`VisionTower` = a small CNN encoder (a grid of features per image) + an MLP projector to the
decoder width + learned identity embeddings (camera, frame slot, grid cell), so the decoder
knows which camera and which moment each visual token shows. The frame-slot embedding is
optional: exactly streamable models leave it out (a frame's tokens must not depend on the slot
it occupies; temporal order reaches the text through RoPE distance instead). Images arrive as K cameras × T
frames in view-major order (camera 0 oldest→newest, then camera 1, …).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import ModelConfigError, check_section

SCENE_HIDDEN = 256  # the scene head's hidden width
SCENE_READS = ("cells", "map")
# Plausibility bounds (the vision tower's tensors and every frame's preprocessing scale
# with them): beyond one a config.json is corrupt, refused before anything is allocated.
MAX_IMAGE_SIDE = 2048
MAX_CHANNELS = 4096
MAX_GRID_SIDE = 64
MAX_HEAD_OUTPUTS = 1024  # keypoints, scene numbers


class VisionEncoder(Protocol):
    """Any image encoder: (N, 3, H, W) float images → (N, tokens_per_image, feature_dim)."""

    feature_dim: int
    tokens_per_image: int

    def __call__(self, images: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class VisionConfig:
    image_height: int = 72
    image_width: int = 128
    channels: tuple[int, ...] = (16, 32, 64)
    grid: tuple[int, int] = (4, 4)  # (rows, cols) of visual tokens per image
    # Spatial-softmax keypoints: K learned feature maps → their expected (x, y) image
    # positions, as one more token per image (0: none). See SmallCNN.
    keypoints: int = 0
    # The scene token: a head regresses `scene` numbers per image (what training's scene
    # targets say: e.g. the object's, the goal's and the hand's positions), and their
    # embedding is one more token per image, after the keypoint token (0: none). See SmallCNN.
    scene: int = 0
    # What the scene head reads: `cells`, the pooled grid (and the keypoints), or `map`, the
    # last stage's full feature map (and the keypoints), whose position-specific weights
    # can read *where* in the image a feature is (a car's distance: docs/ALGORITHMS.md §3.5).
    scene_reads: str = "cells"

    def __post_init__(self) -> None:
        for name in ("image_height", "image_width"):
            if not 8 <= getattr(self, name) <= MAX_IMAGE_SIDE:
                raise ModelConfigError(
                    f"vision.{name}={getattr(self, name)}: must be in [8, {MAX_IMAGE_SIDE}]"
                )
        if not self.channels or not all(1 <= c <= MAX_CHANNELS for c in self.channels):
            raise ModelConfigError(
                f"vision.channels={list(self.channels)}: must be in [1, {MAX_CHANNELS}]"
            )
        if len(self.grid) != 2 or not all(1 <= g <= MAX_GRID_SIDE for g in self.grid):
            raise ModelConfigError(
                f"vision.grid={list(self.grid)}: must be [rows, cols] in [1, {MAX_GRID_SIDE}]"
            )
        for name in ("keypoints", "scene"):
            if not 0 <= getattr(self, name) <= MAX_HEAD_OUTPUTS:
                raise ModelConfigError(
                    f"vision.{name}={getattr(self, name)}: must be in [0, {MAX_HEAD_OUTPUTS}]"
                )
        if self.scene_reads not in SCENE_READS:
            raise ModelConfigError(
                f"vision.scene_reads={self.scene_reads!r}: must be one of {SCENE_READS}"
            )

    @property
    def tokens_per_image(self) -> int:
        """The grid's cells, then the keypoint token and the scene token where there are."""
        return self.grid[0] * self.grid[1] + (1 if self.keypoints else 0) + (1 if self.scene else 0)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VisionConfig:
        d = check_section(cls, d, "vision_config.", unknown=True)
        d["channels"] = tuple(d.get("channels", cls.channels))
        d["grid"] = tuple(d.get("grid", cls.grid))
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["channels"], d["grid"] = list(self.channels), list(self.grid)
        for key in ("keypoints", "scene"):  # folders without them keep their config.json
            if not d[key]:
                del d[key]
        if d["scene_reads"] == "cells":
            del d["scene_reads"]
        return d


def _parse_pair(text: str, what: str, form: str, example: str, minimum: int) -> tuple[int, int]:
    """`AxB` → (A, B), both >= `minimum`; ValueError naming `what` and `form` otherwise."""
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError as e:
        raise ValueError(f"{what} {text!r}: expected {form}, e.g. {example}") from e
    if a < minimum or b < minimum:
        raise ValueError(f"{what} {text!r}: both numbers must be >= {minimum}")
    return a, b


def parse_grid(text: str) -> tuple[int, int]:
    """`RxC` (e.g. `3x5`) → (rows, cols) of visual tokens per image; ValueError otherwise."""
    return _parse_pair(text, "grid", "RxC", "3x5", 1)


def parse_size(text: str) -> tuple[int, int]:
    """`HxW` (e.g. `96x160`) → (height, width) of the tower's input; ValueError otherwise."""
    return _parse_pair(text, "image size", "HxW", "96x160", 8)


def resample_cells(table: torch.Tensor, old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    """A (old rows*cols, W) table of per-cell embeddings, row-major, resampled bilinearly to
    `new` (rows, cols) with the corners kept: a cell of the new grid gets the embedding of the
    place it covers on the old one."""
    grid = table.detach().T.reshape(1, table.shape[1], *old)  # (1, W, r, c)
    out = F.interpolate(grid, size=new, mode="bilinear", align_corners=True)
    return out.reshape(table.shape[1], new[0] * new[1]).T.contiguous()


class SmallCNN(nn.Module):
    """Stride-2 3×3 conv stages with GELU, then adaptive average pooling to the token grid.

    With `keypoints` K > 0 it also finds K points per image (spatial softmax, as in
    end-to-end visuomotor policies, docs/ALGORITHMS.md §8.1): a 1×1 conv turns the features
    of the second-to-last stage (stride 4: 16×16 cells of a 64×64 image) into K maps, a
    softmax over each map's cells (a learned temperature) weights the cell centres, and the
    K expected (x, y) positions in [-1, 1] become one more token, after the grid's. Average
    pooling keeps *what* a cell holds but not *where* in the cell it is (a 4×4 grid of a
    64×64 image is 16 pixels a cell); the expected positions carry where, below a pixel.

    With `scene` n > 0 it also *says* where things are (docs/ALGORITHMS.md §8.3): an MLP reads
    the pooled grid (and the keypoint positions) and regresses n numbers — training supervises
    them with the simulator's object, goal and hand positions — and a linear embedding of
    those numbers is the last token. The decoder then finds the scene's geometry in one
    token as coordinates, instead of having to learn to decode it from the grid.
    """

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        widths = []
        for ch in config.channels:
            layers += [nn.Conv2d(in_ch, ch, 3, stride=2, padding=1), nn.GroupNorm(1, ch), nn.GELU()]
            in_ch = ch
            widths.append(ch)
        self.stages = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(config.grid)
        self.feature_dim = in_ch
        self.tokens_per_image = config.tokens_per_image
        self.num_keypoints = config.keypoints
        if config.keypoints:
            # the stage the points are found in: the second-to-last (the last with one)
            self.keypoint_stage = max(len(widths) - 2, 0)
            self.keypoint_conv = nn.Conv2d(widths[self.keypoint_stage], config.keypoints, 1)
            self.keypoint_log_temperature = nn.Parameter(torch.zeros(()))
            self.keypoint_proj = nn.Linear(2 * config.keypoints, in_ch)
        self.num_scene = config.scene
        self.scene_reads_map = config.scene_reads == "map"
        if config.scene:
            cells = config.grid[0] * config.grid[1]
            if self.scene_reads_map:  # each stride-2 stage (3x3, padding 1) halves, rounding up
                fh, fw = config.image_height, config.image_width
                for _ in config.channels:
                    fh, fw = (fh + 1) // 2, (fw + 1) // 2
                cells = fh * fw
            reads = cells * in_ch + 2 * config.keypoints
            self.scene_head = nn.Sequential(
                nn.Linear(reads, SCENE_HIDDEN), nn.GELU(), nn.Linear(SCENE_HIDDEN, config.scene)
            )
            self.scene_embed = nn.Linear(config.scene, in_ch)

    def features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last stage's features (N, C, fh, fw) and, with keypoints, those of the stage
        the points are found in (None without)."""
        x, found = images, None
        for i in range(len(self.stages) // 3):
            x = self.stages[3 * i + 2](self.stages[3 * i + 1](self.stages[3 * i](x)))
            if self.num_keypoints and i == self.keypoint_stage:
                found = x
        return x, found

    def keypoint_positions(self, features: torch.Tensor) -> torch.Tensor:
        """(N, C', h, w) features → (N, K, 2): the expected (x, y) of each of the K maps, x
        left → right and y top → bottom in [-1, 1] (the cell centres weighted by the map's
        softmax)."""
        maps = self.keypoint_conv(features)  # (N, K, h, w)
        n, k, h, w = maps.shape
        weights = torch.softmax(maps.flatten(2) * self.keypoint_log_temperature.exp(), dim=-1)
        xs = (torch.arange(w, dtype=maps.dtype, device=maps.device) + 0.5) * (2.0 / w) - 1.0
        ys = (torch.arange(h, dtype=maps.dtype, device=maps.device) + 0.5) * (2.0 / h) - 1.0
        cx = xs.repeat(h)  # (h*w,) row-major
        cy = ys.repeat_interleave(w)
        return torch.cat([weights @ cx[:, None], weights @ cy[:, None]], dim=-1)  # (N, K, 2)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.tokens_and_scene(images)[0]

    def tokens_and_scene(
        self, images: torch.Tensor, scene_given: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(N, 3, H, W) → the tokens (N, G', C) and, with a scene head, its numbers (N, n)."""
        last, found = self.features(images)
        tokens = self.pool(last).flatten(2).transpose(1, 2)  # (N, gh*gw, C), row-major cells
        return self.extend(tokens, found, last, scene_given)

    def extend(
        self,
        cells: torch.Tensor,
        found: torch.Tensor | None,
        last: torch.Tensor | None = None,
        scene_given: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The grid's tokens (N, gh*gw, C), the keypoint stage's features (None without
        keypoints) and the last stage's map (N, C, fh, fw; needed by a scene head that reads
        it) → every token (N, G', C): the cells, the keypoint token, the scene token; and the
        scene head's numbers (N, n) (None without one).

        `scene_given` (N, n), training only: numbers the scene token says instead of the
        head's where they are not NaN (teacher forcing, so the decoder learns to trust the
        token); the returned numbers stay the head's own."""
        parts, scene = [cells], None
        points = None if found is None else self.keypoint_positions(found).flatten(1)
        if points is not None:
            parts.append(self.keypoint_proj(points)[:, None])
        if self.num_scene:
            if self.scene_reads_map and last is None:
                raise ValueError("a scene head that reads the map needs the last stage's map")
            seen = last.flatten(1) if self.scene_reads_map else cells.flatten(1)
            reads = seen if points is None else torch.cat([seen, points], 1)
            scene = self.scene_head(reads)  # (N, n)
            said = scene
            if scene_given is not None:
                given = scene_given.to(scene.dtype)
                said = torch.where(torch.isnan(given), scene, given)
            parts.append(self.scene_embed(said)[:, None])
        return (torch.cat(parts, dim=1) if len(parts) > 1 else cells), scene


class VisionTower(nn.Module):
    """Encoder + projector + identity embeddings (state-dict prefix `visual.` in a folder)."""

    def __init__(
        self,
        config: VisionConfig,
        width: int,
        num_cameras: int,
        num_frames: int,
        frame_slot_embedding: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
        self.num_cameras, self.num_frames = num_cameras, num_frames
        self.encoder = SmallCNN(config)
        feature_dim = self.encoder.feature_dim
        self.projector = nn.Sequential(
            nn.Linear(feature_dim, width), nn.GELU(), nn.Linear(width, width)
        )
        self.camera_embed = nn.Embedding(num_cameras, width)
        # Without it a frame's tokens do not depend on its slot (exact streaming).
        self.frame_embed = nn.Embedding(num_frames, width) if frame_slot_embedding else None
        self.cell_embed = nn.Embedding(config.tokens_per_image, width)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (N, H', W', 3) at any size → float (N, 3, H, W) in [-1, 1] at model size."""
        x = images.permute(0, 3, 1, 2).float() / 255.0  # (N, 3, H', W')
        size = (self.config.image_height, self.config.image_width)
        if tuple(x.shape[-2:]) != size:
            x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
        return x * 2.0 - 1.0

    def preprocess_frames(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """`preprocess` of uint8 (H', W', 3) frames → (N, 3, H, W): frames of one size in one
        call (the resize treats every image of a batch alone: the same values as one by
        one), others one by one. The frames are copied (they may be read-only)."""
        if len({image.shape for image in images}) == 1:
            return self.preprocess(torch.tensor(np.stack(images)))
        return torch.cat([self.preprocess(torch.tensor(image)[None]) for image in images])

    def forward(
        self,
        images: torch.Tensor,
        scene_out: list[torch.Tensor] | None = None,
        scene_given: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """images (K*T, 3, H, W) view-major → visual tokens (K*T, tokens_per_image, width);
        `scene_out` (models with a scene token) collects the scene head's numbers (K*T, n);
        `scene_given` (K*T, n), training only, replaces them in the token where not NaN."""
        K, T = self.num_cameras, self.num_frames
        if images.shape[0] != K * T:
            raise ValueError(f"VisionTower: {images.shape[0]} images, expected {K}x{T}")
        if scene_out is None:
            if scene_given is not None:
                raise ValueError("VisionTower: scene_given needs scene_out")
            tokens = self.project(images)  # (K*T, G, W)
        else:
            features, scene = self.encoder.tokens_and_scene(
                images.to(self.camera_embed.weight.dtype), scene_given
            )
            if scene is None:
                raise ValueError("VisionTower: scene_out asked of a model without a scene token")
            scene_out.append(scene)
            tokens = self.projector(features)
        camera = torch.arange(K, device=tokens.device).repeat_interleave(T)  # k = i // T
        frame = torch.arange(T, device=tokens.device).repeat(K)  # t = i % T
        return self.add_identity(tokens, camera, frame)

    def project(self, images: torch.Tensor) -> torch.Tensor:
        """images (N, 3, H, W) → projected features (N, G, W) before the identity embeddings:
        what the streaming vision cache keeps per (camera, stamp)."""
        dtype = self.camera_embed.weight.dtype
        return self.projector(self.encoder(images.to(dtype)))  # (N, G, W)

    def add_identity(
        self, tokens: torch.Tensor, camera: torch.Tensor, frame: torch.Tensor
    ) -> torch.Tensor:
        """tokens (N, G, W) of the images at camera (N,) and frame slot (N,) → visual tokens
        (N, G, W) with the camera, frame-slot (when the model has it) and cell embeddings."""
        identity = self.camera_embed(camera)[:, None]  # (N, 1, W)
        if self.frame_embed is not None:
            identity = identity + self.frame_embed(frame)[:, None]
        cells = torch.arange(tokens.shape[1], device=tokens.device)
        return tokens + identity + self.cell_embed(cells)[None]  # (N, G, W)
