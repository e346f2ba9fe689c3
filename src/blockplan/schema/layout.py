"""Token-level layouts shared by the schema and the decoding engine.

These are the contract between `schema/` (which builds them) and `decoding/` (which decodes
against them): the engine knows nothing about JSON, text or tokenization, only positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

# Editable positions per decoding block (d) unless a model says otherwise: Fast-dLLM v2 /
# Fast-dDrive's block size, and our models'.
DEFAULT_BLOCK_SIZE = 32

# Section names in causal order ("perceive, reason, decide, plan").
SECTION_NAMES: tuple[str, ...] = (
    "critical_objects",
    "explanation",
    "future_meta_behavior",
    "trajectory",
)


class Tokenizer(Protocol):
    """What the schema and the engine need from a tokenizer. Special tokens by name only."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_id(self, name: str) -> int:
        """The id of a special token by its literal text (e.g. "<|MASK|>"); raises KeyError
        naming the token if the vocabulary lacks it or it is not a single id."""
        ...


@dataclass(frozen=True)
class Section:
    """One section of the answer: positions [start, end) relative to the answer start."""

    name: str
    start: int
    end: int
    num_editable: int


@dataclass(frozen=True)
class Block:
    """One decoding block: answer positions [start, end), inside a single section."""

    start: int
    end: int
    section: str


@dataclass(frozen=True)
class Scaffold:
    """The full answer template for one schema + tokenizer + block size.

    token_ids: (A,) the answer; structural positions hold their fixed token, editable
    positions hold `mask_id`. is_editable: (A,) bool. Blocks cover [0, A) in order, aligned
    to section starts, never straddling two sections.
    """

    token_ids: np.ndarray
    is_editable: np.ndarray
    sections: tuple[Section, ...]
    blocks: tuple[Block, ...]
    block_size: int
    mask_id: int
    null_id: int

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(f"scaffold has no section {name!r}")

    def editable_positions(self, section: str | None = None) -> np.ndarray:
        """Answer positions of editable slots, optionally of one section."""
        mask = self.is_editable.copy()
        if section is not None:
            s = self.section(section)
            mask[: s.start] = False
            mask[s.end :] = False
        return np.flatnonzero(mask)


def section_of(scaffold: Scaffold, position: int) -> str:
    """The name of the scaffold section holding answer `position`."""
    for s in scaffold.sections:
        if s.start <= position < s.end:
            return s.name
    raise IndexError(f"answer position {position} is in no section")


def block_end_at(scaffold: Scaffold, position: int) -> int:
    """The end of the scaffold block holding `position`."""
    for block in scaffold.blocks:
        if block.start <= position < block.end:
            return block.end
    raise IndexError(f"answer position {position} is in no block")


@dataclass(frozen=True)
class ImageSpan:
    """Prompt positions [start, end) that receive one camera frame's visual tokens."""

    start: int
    end: int
    camera_index: int
    frame_index: int


@dataclass(frozen=True)
class PromptLayout:
    """A rendered prompt as token ids.

    token_ids: (P,) with an image placeholder id at every visual-token position.
    header_end: positions [0, header_end) are the prompt header (system text) that every
    visual token may attend to under frame-local attention. image_spans are view-major
    (camera 0 oldest→newest, then camera 1, …). The answer follows position P-1.
    ego_span: [start, end) of the ego slots that a numeric ego encoder fills (model/ego.py),
    with `ego_history` ((num_history, 6), the rows it encodes) and `lane_pose` ((2,) the
    lane offset and heading error at t0, NaN where unknown; read by an encoder with
    `lane_pose`) and `lead` ((2,) the gap to the car ahead in the lane, infinite when none,
    and its speed; NaN gap where unknown; read by an encoder with `lead`) and `beside`
    ((2, 5) the lanes beside, per side: lane count, gap and speed of the car ahead and of the
    car behind in that lane line; NaN where unknown; read by an encoder with `beside`) and
    `route_ahead` ((A, 2) the route ahead in the ego frame; NaN where unknown; read by an
    encoder with `route`); None when the prompt spells the history out as digits.
    """

    token_ids: np.ndarray
    header_end: int
    image_spans: tuple[ImageSpan, ...]
    ego_span: tuple[int, int] | None = None
    ego_history: np.ndarray | None = None
    lane_pose: np.ndarray | None = None
    lead: np.ndarray | None = None
    beside: np.ndarray | None = None
    route_ahead: np.ndarray | None = None

    def ego_inputs(self) -> dict:
        """The `embed_prompt` keywords of the ego slots (empty for a digit prompt)."""
        if self.ego_span is None:
            return {}
        return {
            "ego_span": self.ego_span,
            "ego_history": self.ego_history,
            "lane_pose": self.lane_pose,
            "lead": self.lead,
            "beside": self.beside,
            "route_ahead": self.route_ahead,
        }

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])
