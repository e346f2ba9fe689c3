"""Road geometry from a highway-env road network, in REP-103, plus the ground texture.

Each lane is sampled once per episode into centre/left/right polylines with its two line
types. The ground seen by the cameras is a top-down texture (asphalt, lane markings, grass)
rasterised only inside a window around the ego and re-rasterised when the ego drives away
from the window centre, so the cost never depends on the size of the road network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

# Line types as highway-env numbers them (LineType): NONE, STRIPED, CONTINUOUS, CONTINUOUS_LINE.
LINE_NONE, LINE_DASHED, LINE_SOLID = "none", "dashed", "solid"
_HW_LINE_TYPES = {0: LINE_NONE, 1: LINE_DASHED, 2: LINE_SOLID, 3: LINE_SOLID}

STRAIGHT_SAMPLE_M = 25.0
CURVED_SAMPLE_M = 1.0
DASH_M, DASH_GAP_M = 3.0, 6.0
MARKING_WIDTH_M = 0.2

ASPHALT = (88, 88, 92)
GRASS = (84, 118, 62)
MARKING_WHITE = (235, 235, 230)


@dataclass(frozen=True)
class LaneGeom:
    """One lane: (N,) arc length s and (N, 2) centre/left/right polylines in REP-103."""

    s: np.ndarray
    center: np.ndarray
    left: np.ndarray
    right: np.ndarray
    left_line: str
    right_line: str


@dataclass(frozen=True)
class RoadMap:
    """Every lane's geometry, and how many lanes each road (highway-env's ("from", "to")
    edge) has side by side: lane id 0 is the driver's leftmost."""

    lanes: tuple[LaneGeom, ...]
    roads: tuple[tuple[str, str, int], ...] = ()  # ("from", "to", number of lanes)

    def lanes_beside(self, lane_index: tuple[str, str, int]) -> tuple[float, float]:
        """(lanes to the driver's left, lanes to the right) of the lane `lane_index` on its
        road; (NaN, NaN) for a road the map does not know."""
        return lanes_beside(self.roads, lane_index)


def network_roads(network: Any) -> tuple[tuple[str, str, int], ...]:
    """("from", "to", number of lanes) of every road of a highway-env RoadNetwork."""
    return tuple(
        (a, b, len(lanes)) for a, ends in network.graph.items() for b, lanes in ends.items()
    )


def lanes_beside(
    roads: tuple[tuple[str, str, int], ...], lane_index: tuple[str, str, int]
) -> tuple[float, float]:
    """(lanes to the driver's left, lanes to the right) of the lane `lane_index` (lane id 0
    is the leftmost) on its road among `roads`; (NaN, NaN) for a road not among them."""
    counts = {(a, b): n for a, b, n in roads}
    count = counts.get((lane_index[0], lane_index[1]))
    if count is None:
        return (float("nan"), float("nan"))
    return (float(lane_index[2]), float(count - 1 - lane_index[2]))


def _sample_lane(lane: Any) -> LaneGeom:
    length = float(lane.length)
    is_straight = type(lane).__name__ == "StraightLane"
    step = STRAIGHT_SAMPLE_M if is_straight else CURVED_SAMPLE_M
    s = np.linspace(0.0, length, max(2, int(np.ceil(length / step)) + 1))
    half = float(lane.width_at(0.0)) / 2.0
    pts = np.array(
        [[lane.position(si, 0.0), lane.position(si, -half), lane.position(si, half)] for si in s]
    )  # (N, 3, 2) highway-env coords; lateral -half is the driver's left
    pts[..., 1] *= -1.0
    left_type, right_type = (_HW_LINE_TYPES.get(int(t), LINE_NONE) for t in lane.line_types)
    return LaneGeom(s, pts[:, 0], pts[:, 1], pts[:, 2], left_type, right_type)


def road_map_from_network(network: Any) -> RoadMap:
    """Sample every lane of a highway-env RoadNetwork."""
    lanes = tuple(_sample_lane(lane) for lane in network.lanes_list())
    return RoadMap(lanes=lanes, roads=network_roads(network))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive True values."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2], edges[1::2], strict=True))


def _interp(s: np.ndarray, poly: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(at, s, poly[:, 0]), np.interp(at, s, poly[:, 1])], axis=-1)


class GroundTexture:
    """A top-down RGB texture of the road around a moving centre.

    pixels[r, c] covers world x = x_min + (c + 0.5) * res, y = y_max - (r + 0.5) * res.
    """

    def __init__(
        self,
        road: RoadMap,
        resolution_m: float = 0.1,
        half_size_m: float = 110.0,
        seed: int = 0,
    ) -> None:
        self.road = road
        self.res = resolution_m
        self.half = half_size_m
        self.size = int(round(2 * half_size_m / resolution_m))
        rng = np.random.default_rng(seed)
        # Tileable multiplicative noise, anchored to world coordinates (the window origin is
        # snapped to the tile), gives the ground its grain; applied when sampling.
        self._noise = (0.9 + 0.2 * rng.random((256, 256))).astype(np.float32)
        self.center: np.ndarray | None = None
        self.pixels = np.zeros((self.size, self.size, 3), np.uint8)
        self.num_rasterised = 0

    def ensure(self, x: float, y: float) -> None:
        """Centre the window on the noise-tile grid point nearest (x, y), re-rasterising when
        that point changes. The window is a function of (x, y) alone, so an image does not
        depend on which frames were rendered before it (a data set renders its frames in
        another order than a bag; both must show the model the same pixels). The ego stays
        within 18.1 m (half a 25.6 m tile diagonal) of the centre."""
        grid = self.res * 256  # snap the window to the noise tile so the grain stays put
        center = np.array([round(x / grid) * grid, round(y / grid) * grid])
        if self.center is not None and np.array_equal(center, self.center):
            return
        self.center = center
        self._rasterise()

    @property
    def x_min(self) -> float:
        return float(self.center[0] - self.half)

    @property
    def y_max(self) -> float:
        return float(self.center[1] + self.half)

    def _to_px(self, xy: np.ndarray) -> list[tuple[float, float]]:
        cols = (xy[:, 0] - self.x_min) / self.res
        rows = (self.y_max - xy[:, 1]) / self.res
        return list(zip(cols.tolist(), rows.tolist(), strict=True))

    def _rasterise(self) -> None:
        img = Image.new("RGB", (self.size, self.size), GRASS)
        draw = ImageDraw.Draw(img)
        lo, hi = self.center - self.half - 10.0, self.center + self.half + 10.0
        marking_px = max(1, int(round(MARKING_WIDTH_M / self.res)))
        visible = []
        for lane in self.road.lanes:
            inside = np.all((lane.center >= lo) & (lane.center <= hi), axis=1)
            # keep one sample either side so polygons reach the window edge
            inside = inside | np.roll(inside, 1) | np.roll(inside, -1)
            for a, b in _runs(inside):
                if b - a >= 2:
                    visible.append((lane, a, b))
        for lane, a, b in visible:
            poly = np.concatenate([lane.left[a:b], lane.right[a:b][::-1]])
            draw.polygon(self._to_px(poly), fill=ASPHALT)
        for lane, a, b in visible:
            for edge, kind in ((lane.left, lane.left_line), (lane.right, lane.right_line)):
                if kind == LINE_SOLID:
                    draw.line(self._to_px(edge[a:b]), fill=MARKING_WHITE, width=marking_px)
                elif kind == LINE_DASHED:
                    s0, s1 = lane.s[a], lane.s[b - 1]
                    period = DASH_M + DASH_GAP_M
                    for start in np.arange(np.floor(s0 / period) * period, s1, period):
                        at = np.linspace(max(start, s0), min(start + DASH_M, s1), 4)
                        if at[-1] > at[0]:
                            pts = _interp(lane.s, edge, at)
                            draw.line(self._to_px(pts), fill=MARKING_WHITE, width=marking_px)
        self.pixels = np.array(img, dtype=np.uint8)
        self.pixels[-1, -1] = GRASS  # the colour looked up for points outside the window
        self._flat = self.pixels.reshape(-1, 3)
        self._grass_index = self.size * self.size - 1
        self.num_rasterised += 1

    def sample(self, xy: np.ndarray) -> np.ndarray:
        """(G, 2) world points -> (G, 3) float32 colours with grain (grass outside)."""
        cols = ((xy[:, 0] - self.x_min) * (1.0 / self.res)).astype(np.int32)
        rows = ((self.y_max - xy[:, 1]) * (1.0 / self.res)).astype(np.int32)
        inside = (cols >= 0) & (cols < self.size) & (rows >= 0) & (rows < self.size)
        flat = np.where(inside, rows * self.size + cols, self._grass_index)
        grain = self._noise[rows & 255, cols & 255]  # (G,)
        return np.take(self._flat, flat, axis=0) * grain[:, None]
