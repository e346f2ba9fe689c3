"""`--render-dir`: a few PNG frames of an episode (all cameras of the rig in a grid)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

COLUMNS = 2


def camera_grid(images: dict[str, np.ndarray]) -> np.ndarray:
    """{camera: (H, W, 3)} -> (rows·H, COLUMNS·W, 3) uint8, cameras in rig order."""
    tiles = list(images.values())
    h, w = tiles[0].shape[:2]
    rows = -(-len(tiles) // COLUMNS)
    grid = np.zeros((rows * h, COLUMNS * w, 3), np.uint8)
    for k, tile in enumerate(tiles):
        r, c = divmod(k, COLUMNS)
        grid[r * h : (r + 1) * h, c * w : (c + 1) * w] = tile
    return grid


class FrameWriter:
    """Writes one grid PNG every `every_s` of simulated time, at most `max_frames`."""

    def __init__(
        self, folder: str | Path, prefix: str, every_s: float = 1.0, max_frames: int = 10
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.every_s = every_s
        self.max_frames = max_frames
        self.written: list[Path] = []
        self._next_t = 0.0

    def __call__(self, t: float, images: dict[str, np.ndarray]) -> None:
        if len(self.written) >= self.max_frames or t + 1e-9 < self._next_t:
            return
        self._next_t = t + self.every_s
        image = Image.fromarray(camera_grid(images))
        ImageDraw.Draw(image).text((4, 4), f"{self.prefix} t={t:5.1f} s", fill=(255, 255, 0))
        path = self.folder / f"{self.prefix}_{len(self.written):03d}.png"
        image.save(path)
        self.written.append(path)
