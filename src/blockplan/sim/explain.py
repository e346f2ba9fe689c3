"""The explanation sentence of a label: what is ahead, what the ego does, and why.

Wording varies (phrases are drawn with the caller's generator, so a label is reproducible
from the episode seed and step). The text stays within MAX_WORDS words and, given a
`fits(text)` predicate (e.g. "at most schema.explanation_budget tokens"), within the model's
token budget: the longest variant that fits is chosen (scene + action + reason, then scene +
action, then action + reason, then the action alone). The facts come from the world state
and the expert's actual future motion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from blockplan.types import Lateral, Longitudinal

MAX_WORDS = 20


@dataclass
class Situation:
    """Facts at t0 (ego frame): the lead vehicle in the ego's lane, the closest conflicting
    vehicle, a static hazard ahead, and the behaviour the expert chose."""

    ego_speed: float
    lead_gap_m: float | None = None
    lead_speed: float | None = None
    conflict: str | None = None  # "merging", "crossing" or "behind"
    conflict_side: str = ""
    conflict_dist_m: float = float("inf")
    hazard_ahead_m: float | None = None
    longitudinal: Longitudinal = Longitudinal.KEEP
    lateral: Lateral = Lateral.LANE_FOLLOW

    def as_facts(self) -> dict[str, float | str]:
        facts: dict[str, float | str] = {"ego_speed": round(self.ego_speed, 2)}
        if self.lead_gap_m is not None:
            facts["lead_gap_m"] = round(self.lead_gap_m, 2)
            facts["lead_speed"] = round(float(self.lead_speed or 0.0), 2)
        if self.conflict is not None:
            facts["conflict"] = f"{self.conflict}_{self.conflict_side}"
        if self.hazard_ahead_m is not None:
            facts["hazard_ahead_m"] = round(self.hazard_ahead_m, 2)
        return facts


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _scene(s: Situation, rng: np.random.Generator) -> str:
    parts = []
    if s.lead_gap_m is not None and s.lead_gap_m < 60.0:
        gap = int(round(s.lead_gap_m))
        slower = s.lead_speed is not None and s.lead_speed < s.ego_speed - 1.0
        adj = "slower " if slower else ""
        parts.append(
            _pick(
                rng,
                (
                    f"{adj}lead car {gap} m ahead",
                    f"{adj}car {gap} m ahead",
                    f"{adj}car {gap} m in front",
                ),
            )
        )
    else:
        parts.append(_pick(rng, ("lane ahead clear", "open road ahead", "no car close ahead")))
    if s.conflict == "merging":
        parts.append(
            _pick(
                rng,
                (f"car merging from {s.conflict_side}", f"car cutting in from {s.conflict_side}"),
            )
        )
    elif s.conflict == "crossing":
        parts.append(_pick(rng, ("crossing traffic", "car crossing our path")))
    elif s.conflict == "behind":
        parts.append(f"car closing on {s.conflict_side}")
    if s.hazard_ahead_m is not None:
        parts.append(_pick(rng, ("obstacle ahead", "lane end ahead")))
    return ", ".join(parts)


_LONG = {
    Longitudinal.KEEP: ("keep speed", "hold speed", "cruise"),
    Longitudinal.ACCELERATE: ("speed up", "accelerate", "gain speed"),
    Longitudinal.DECELERATE: ("slow down", "brake gently", "ease off"),
    Longitudinal.STOP: ("stop", "come to a stop", "stop and wait"),
}
_LAT = {
    Lateral.LANE_FOLLOW: ("stay in lane", "keep lane", "follow the lane"),
    Lateral.LANE_CHANGE_LEFT: ("change lane left", "move one lane left"),
    Lateral.LANE_CHANGE_RIGHT: ("change lane right", "move one lane right"),
    Lateral.TURN_LEFT: ("turn left", "take the left turn"),
    Lateral.TURN_RIGHT: ("turn right", "take the right turn"),
    Lateral.STRAIGHT: ("go straight", "continue straight"),
}


def _reason(s: Situation, rng: np.random.Generator) -> str:
    close_lead = s.lead_gap_m is not None and s.lead_gap_m < 10.0 + 1.5 * max(s.ego_speed, 0.0)
    slower_lead = (
        s.lead_gap_m is not None
        and s.lead_speed is not None
        and s.lead_speed < s.ego_speed - 1.0
        and s.lead_gap_m < 60.0
    )
    if s.lateral in (Lateral.LANE_CHANGE_LEFT, Lateral.LANE_CHANGE_RIGHT):
        if slower_lead or close_lead:
            return _pick(rng, ("to pass", "to overtake"))
        return _pick(rng, ("for a better lane", "to keep pace"))
    if s.longitudinal in (Longitudinal.DECELERATE, Longitudinal.STOP):
        if s.conflict is not None:
            return _pick(rng, ("to yield", "to let it pass", "to avoid conflict"))
        if slower_lead or close_lead:
            return _pick(rng, ("to keep a gap", "to keep distance"))
        return _pick(rng, ("to match traffic", "for a safe speed"))
    if s.longitudinal == Longitudinal.ACCELERATE:
        return _pick(rng, ("to target speed", "as the way is free"))
    return _pick(rng, ("as traffic is steady", "as the gap is safe", "as all is calm"))


def explain(
    s: Situation, rng: np.random.Generator, fits: Callable[[str], bool] | None = None
) -> str:
    """One sentence of at most MAX_WORDS words, the longest variant that `fits`."""
    scene = _scene(s, rng)
    action = f"{_pick(rng, _LONG[s.longitudinal])}, {_pick(rng, _LAT[s.lateral])}"
    reason = _reason(s, rng)
    variants = (f"{scene}; {action} {reason}.", f"{scene}; {action}.", f"{action} {reason}.")
    for text in variants:
        text = text[0].upper() + text[1:]
        if len(text.split()) <= MAX_WORDS and (fits is None or fits(text)):
            return text
    return f"{action[0].upper()}{action[1:]}."  # the action alone: the shortest we can say
