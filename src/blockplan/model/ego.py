"""The numeric ego-state encoder: the ego history as a few prompt embeddings, not digits.

The digit prompt spells the ego history out as ~130 number tokens (3 rows × 6 values × 7
characters) that a small decoder has to learn to read before it can plan from them. With an
ego encoder the prompt instead holds `tokens` placeholder slots ("Ego state: ▢▢▢▢"), and
a two-layer MLP turns the (num_history, 6) history — the same rows `ego_history_array`
computes for the digit prompt — into the embeddings written into those slots, the way the
vision tower's outputs fill the image slots. The answer format (scaffold, digits, strict
parser) is unchanged, so every decoding strategy applies as before; the prompt is ~110
tokens shorter.

The inputs are divided by fixed scales (metres, m/s, m/s²: values of order one at highway
speeds) so that the encoder needs no data statistics in its folder.

An encoder with `lane_pose` also reads the ego's pose in its lane at t0 — the left-positive
offset from the lane centre (m) and the heading error against the lane (rad), what a
vehicle's localisation on its map provides — as two more scaled inputs and a flag that says
whether the pose is known. An unknown pose (NaN: no localisation, or a stale one) enters as
zeros with the flag down, so the same model plans without it (docs/ALGORITHMS.md §3.3).

An encoder with `scene` (models with a scene token, docs/ALGORITHMS.md §3.5) also reads the
front camera's newest scene token, the visual token that says the gap to the car ahead, as
`hidden_size` more inputs after the others. The decoder reads the encoder's slots for every
plan; a decoder trained before the token existed does not learn to attend to it, an MLP
input is used as soon as it helps.

An encoder with `lead` also reads the car ahead in the ego's lane at t0, as an adaptive
cruise control's radar or an object tracker reports it: the gap (m, infinite when no car is
ahead) and that car's speed (m/s). It enters as `LEAD_INPUTS` numbers after all the others
(`lead_inputs`): a known flag, a present flag, 10 m / gap, min(gap, 100 m) / 100 m and the
speed / 10 m/s (the history's speed scale, so the MLP compares it with the ego's). An
unknown lead (NaN: no tracker, or a stale one) enters as zeros with the known flag down
(docs/ALGORITHMS.md §3.6). The camera alone cannot give the speed of a car 50 m ahead: at
the rig's resolution it moves by a fraction of a pixel between frames.

An encoder with `beside` also reads the lanes beside the ego's at t0, per side (left, then
right): how many lanes the road has on that side (a map and localisation give it) and the
nearest car ahead and behind in the lane line on that side (gap m, infinite when none; its
speed m/s; what a tracker gives). It enters as `BESIDE_INPUTS` numbers after all the others
(`beside_inputs`): per side a known flag and a lane-there flag for the lane count, a known
flag for the cars, then for the car ahead and the car behind a present flag, 10 m / gap
(capped) and the speed / 10 m/s. The lane count and the cars are known or unknown (NaN)
apart (docs/ALGORITHMS.md §3.7). A lane change is decided on these: whether there is a lane
to go to and a gap in it.

An encoder with `route` also reads the route ahead: where the planned route is at
`ROUTE_AHEAD_M` metres along it from the ego, as (x, y) in the ego frame at t0 (a router's
path; blockplan.trajectory.route). It enters as `ROUTE_INPUTS` numbers after all the others
(`route_inputs`): a known flag, then each point's x and y over its distance along the route
(the route's direction there, independent of the scale of the distance). An unknown route
(NaN: no router, or a stale or distant path) enters as zeros with the flag down
(docs/ALGORITHMS.md §3.8). Where the road bends, a roundabout's entry or a turn, the route
says it before the cameras can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from blockplan.model.config import ModelConfigError
from blockplan.model.quantized import compute_dtype
from blockplan.types import ROUTE_AHEAD_M

# Column scales of the [x, y, vx, vy, ax, ay] history rows (ego frame at t0).
INPUT_SCALE = (10.0, 2.0, 10.0, 1.0, 2.0, 2.0)
NUM_COLUMNS = len(INPUT_SCALE)
# Scales of the lane pose (offset m, heading error rad) and the inputs it adds: the two
# scaled values and the known flag, after the history rows.
LANE_INPUT_SCALE = (0.25, 0.15)
LANE_INPUTS = 3
# The car ahead: known, present, 10 m / gap, min(gap, 100 m) / 100 m, speed / 10 m/s.
LEAD_INPUTS = 5
LEAD_NEAR_M = 10.0  # 10 m / gap: 1 at 10 m, capped at LEAD_MAX_CLOSENESS
LEAD_MAX_CLOSENESS = 5.0
LEAD_RANGE_M = 100.0
LEAD_SPEED_SCALE = 10.0
# The lanes beside, per side: lanes known, a lane there, cars known, then ahead and behind:
# present, 10 m / gap, speed / 10 m/s.
BESIDE_SIDE_INPUTS = 9
BESIDE_INPUTS = 2 * BESIDE_SIDE_INPUTS
# The route ahead: known, then x / d and y / d of each point at distance d along the route.
ROUTE_INPUTS = 1 + 2 * len(ROUTE_AHEAD_M)


@dataclass(frozen=True)
class EgoEncoderConfig:
    tokens: int = 4  # prompt slots the encoder fills
    rows: int = 3  # history rows it reads (the schema's num_history)
    hidden: int = 256  # the MLP's hidden width
    lane_pose: bool = False  # also reads the lane pose at t0 (offset, heading error)
    scene: bool = False  # also reads the front camera's newest scene token (hidden_size wide)
    lead: bool = False  # also reads the car ahead in the lane (gap, speed), after the rest
    beside: bool = False  # also reads the lanes beside (lane count, cars), after the lead
    route: bool = False  # also reads the route ahead (points along it), after the lanes beside

    def __post_init__(self) -> None:
        # plausibility bounds: beyond one a config.json is corrupt (refused before allocating)
        for name, limit in (("tokens", 256), ("rows", 1024), ("hidden", 1 << 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ModelConfigError(f"ego_encoder.{name}={value!r}: must be an integer >= 1")
            if value > limit:
                raise ModelConfigError(f"ego_encoder.{name}={value}: must be <= {limit}")
        for name in ("lane_pose", "scene", "lead", "beside", "route"):
            if not isinstance(getattr(self, name), bool):
                raise ModelConfigError(
                    f"ego_encoder.{name}={getattr(self, name)!r}: must be a bool"
                )

    @property
    def num_inputs(self) -> int:
        """The inputs before the scene token's (which add the decoder's hidden size) and the
        lead's (which come last)."""
        return self.rows * NUM_COLUMNS + (LANE_INPUTS if self.lane_pose else 0)

    def input_width(self, hidden_size: int) -> int:
        """All the encoder's inputs: history, lane pose, scene token, lead, lanes beside,
        route ahead."""
        return (
            self.num_inputs
            + (hidden_size if self.scene else 0)
            + (LEAD_INPUTS if self.lead else 0)
            + (BESIDE_INPUTS if self.beside else 0)
            + (ROUTE_INPUTS if self.route else 0)
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tokens": self.tokens, "rows": self.rows, "hidden": self.hidden}
        # Folders without the lane pose or the scene keep the config they were written with.
        return (
            d
            | ({"lane_pose": True} if self.lane_pose else {})
            | ({"scene": True} if self.scene else {})
            | ({"lead": True} if self.lead else {})
            | ({"beside": True} if self.beside else {})
            | ({"route": True} if self.route else {})
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EgoEncoderConfig:
        from blockplan.model.config import check_section

        return cls(**check_section(cls, d, "ego_encoder.", unknown=True))


def lane_inputs(lane_pose: torch.Tensor | None, batch: tuple[int, ...]) -> torch.Tensor:
    """(..., 2) lane pose, NaN where unknown (None: unknown everywhere) → (..., 3) encoder
    inputs: offset and heading error in `LANE_INPUT_SCALE` units, then 1 where known (a pose
    with any NaN is unknown as a whole and enters as zeros)."""
    if lane_pose is None:
        return torch.zeros(*batch, LANE_INPUTS)
    if tuple(lane_pose.shape) != (*batch, 2):
        raise ValueError(f"lane pose shape {tuple(lane_pose.shape)}: expected {(*batch, 2)}")
    pose = lane_pose.to(device="cpu", dtype=torch.float64)
    known = torch.isfinite(pose).all(dim=-1, keepdim=True)
    scaled = torch.where(known, pose / torch.tensor(LANE_INPUT_SCALE, dtype=pose.dtype), 0.0)
    return torch.cat([scaled, known.to(pose.dtype)], dim=-1)


def lead_inputs(lead: torch.Tensor | None, batch: tuple[int, ...]) -> torch.Tensor:
    """(..., 2) car ahead (gap m, infinite: none; speed m/s), NaN gap where unknown (None:
    unknown everywhere) → (..., LEAD_INPUTS) encoder inputs: known, present, 10 m / gap
    (capped), min(gap, 100 m) / 100 m, speed / 10 m/s. A present car with a NaN speed is
    unknown as a whole; without a car ahead the speed is not read."""
    if lead is None:
        return torch.zeros(*batch, LEAD_INPUTS)
    if tuple(lead.shape) != (*batch, 2):
        raise ValueError(f"lead shape {tuple(lead.shape)}: expected {(*batch, 2)}")
    lead = lead.to(device="cpu", dtype=torch.float64)
    gap, speed = lead[..., 0], lead[..., 1]
    present = torch.isfinite(gap) & (gap > 0)
    known = (present & torch.isfinite(speed)) | (gap == math.inf)
    present = present & known
    safe_gap = torch.where(present, gap, 1.0)
    closeness = torch.where(present, (LEAD_NEAR_M / safe_gap).clamp(max=LEAD_MAX_CLOSENESS), 0.0)
    reach = torch.where(present, safe_gap.clamp(max=LEAD_RANGE_M) / LEAD_RANGE_M, 1.0)
    speed_in = torch.where(present, torch.nan_to_num(speed) / LEAD_SPEED_SCALE, 0.0)
    out = torch.stack(
        [known.to(lead.dtype), present.to(lead.dtype), closeness, reach, speed_in], dim=-1
    )
    return torch.where(known[..., None], out, 0.0)


def _car_inputs(gap: torch.Tensor, speed: torch.Tensor) -> torch.Tensor:
    """(...,) gap (inf: none) and speed of a car, known → (..., 3): present, 10 m / gap
    (capped at LEAD_MAX_CLOSENESS), speed / 10 m/s; zeros without a car."""
    present = torch.isfinite(gap)
    safe_gap = torch.where(present, gap.clamp(min=1e-3), 1.0)
    closeness = torch.where(present, (LEAD_NEAR_M / safe_gap).clamp(max=LEAD_MAX_CLOSENESS), 0.0)
    speed_in = torch.where(present, torch.nan_to_num(speed) / LEAD_SPEED_SCALE, 0.0)
    return torch.stack([present.to(gap.dtype), closeness, speed_in], dim=-1)


def beside_inputs(beside: torch.Tensor | None, batch: tuple[int, ...]) -> torch.Tensor:
    """(..., 2, 5) lanes beside — per side (left, right): lanes on that side, gap to the car
    ahead in the line beside (m, inf: none), its speed, gap to the car behind, its speed; a
    NaN lane count: the lanes unknown, a NaN gap (or a car without a speed): the cars on that
    side unknown (None: all unknown) → (..., BESIDE_INPUTS) encoder inputs, left then right:
    lanes known, a lane there, cars known, then ahead and behind (`_car_inputs`)."""
    if beside is None:
        return torch.zeros(*batch, BESIDE_INPUTS)
    if tuple(beside.shape) != (*batch, 2, 5):
        raise ValueError(f"beside shape {tuple(beside.shape)}: expected {(*batch, 2, 5)}")
    b = beside.to(device="cpu", dtype=torch.float64)
    lanes = b[..., 0]
    lanes_known = torch.isfinite(lanes)
    lane_there = lanes_known & (lanes > 0)
    gaps, speeds = b[..., [1, 3]], b[..., [2, 4]]
    car_known = ~torch.isnan(gaps) & (gaps >= 0) & ~(torch.isfinite(gaps) & torch.isnan(speeds))
    cars_known = car_known.all(dim=-1)  # (..., 2) per side
    cars = _car_inputs(torch.where(torch.isnan(gaps), math.inf, gaps), speeds)  # (..., 2, 2, 3)
    cars = torch.where(cars_known[..., None, None], cars, 0.0).flatten(-2)  # (..., 2, 6)
    flags = torch.stack([lanes_known, lane_there, cars_known], dim=-1).to(b.dtype)
    return torch.cat([flags, cars], dim=-1).flatten(-2)


def route_inputs(route: torch.Tensor | None, batch: tuple[int, ...]) -> torch.Tensor:
    """(..., A, 2) route ahead in the ego frame at `ROUTE_AHEAD_M` along the route, NaN
    where unknown (None: unknown everywhere) → (..., ROUTE_INPUTS) encoder inputs: known,
    then x / d, y / d per point. A route with any NaN is unknown as a whole."""
    if route is None:
        return torch.zeros(*batch, ROUTE_INPUTS)
    shape = (*batch, len(ROUTE_AHEAD_M), 2)
    if tuple(route.shape) != shape:
        raise ValueError(f"route_ahead shape {tuple(route.shape)}: expected {shape}")
    r = route.to(device="cpu", dtype=torch.float64)
    known = torch.isfinite(r).flatten(-2).all(dim=-1, keepdim=True)  # (..., 1)
    scale = torch.tensor(ROUTE_AHEAD_M, dtype=r.dtype)[:, None]
    scaled = torch.where(known, torch.nan_to_num(r / scale).flatten(-2), 0.0)
    return torch.cat([known.to(r.dtype), scaled], dim=-1)


class EgoEncoder(nn.Module):
    """(rows, 6) ego history → (tokens, hidden_size) prompt embeddings."""

    def __init__(self, config: EgoEncoderConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.register_buffer(
            "scale", torch.tensor(INPUT_SCALE).repeat(config.rows), persistent=False
        )
        inputs = config.input_width(hidden_size)
        self.net = nn.Sequential(
            nn.Linear(inputs, config.hidden),
            nn.SiLU(),
            nn.Linear(config.hidden, config.hidden),
            nn.SiLU(),
            nn.Linear(config.hidden, config.tokens * hidden_size),
        )

    def forward(
        self,
        history: torch.Tensor,
        lane_pose: torch.Tensor | None = None,
        scene: torch.Tensor | None = None,
        lead: torch.Tensor | None = None,
        beside: torch.Tensor | None = None,
        route: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """history (..., rows, 6) and, for an encoder with `lane_pose`, the (..., 2) lane
        pose (NaN or None: unknown; ignored by one without), for one with `scene` the
        (..., hidden_size) scene token, for one with `lead` the (..., 2) car ahead (gap,
        speed; `lead_inputs`), for one with `beside` the (..., 2, 5) lanes beside
        (`beside_inputs`), for one with `route` the (..., A, 2) route ahead
        (`route_inputs`) → (..., tokens, hidden_size)."""
        c = self.config
        if tuple(history.shape[-2:]) != (c.rows, NUM_COLUMNS):
            raise ValueError(
                f"ego history shape {tuple(history.shape)}: the encoder reads "
                f"({c.rows}, {NUM_COLUMNS}) rows"
            )
        dtype = compute_dtype(self.net[0])  # a quantized linear has no float weight
        x = history.to(dtype).flatten(-2) / self.scale.to(dtype)
        if c.lane_pose:
            lane = lane_inputs(lane_pose, tuple(history.shape[:-2]))
            x = torch.cat([x, lane.to(device=x.device, dtype=dtype)], dim=-1)
        if c.scene:
            if scene is None or scene.shape[-1] != self.hidden_size:
                got = None if scene is None else tuple(scene.shape)
                raise ValueError(
                    f"the encoder reads the scene token ({self.hidden_size},): got {got}"
                )
            x = torch.cat([x, scene.to(device=x.device, dtype=dtype).expand(*x.shape[:-1], -1)], -1)
        if c.lead:
            ahead = lead_inputs(lead, tuple(history.shape[:-2]))
            x = torch.cat([x, ahead.to(device=x.device, dtype=dtype)], dim=-1)
        if c.beside:
            lanes = beside_inputs(beside, tuple(history.shape[:-2]))
            x = torch.cat([x, lanes.to(device=x.device, dtype=dtype)], dim=-1)
        if c.route:
            ahead = route_inputs(route, tuple(history.shape[:-2]))
            x = torch.cat([x, ahead.to(device=x.device, dtype=dtype)], dim=-1)
        return self.net(x).unflatten(-1, (c.tokens, self.hidden_size))
