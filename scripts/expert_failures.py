"""Why the simulator's expert fails where it does: each failed closed-loop episode of the
IDM/MOBIL expert (a collision, or leaving the road), with what it hit and a cause.

The closed-loop tables count the expert's own failures next to the planner's; this says
where they come from. Causes, from the two vehicles' roads, lanes, headings and speeds at
the collision (`cause`):

- `entry without yielding`: the ego on a roundabout entry road, the other car on the ring;
- `junction crossing`: both inside an intersection's junction (or one leaving it while the
  other enters) at a crossing angle, with no right of way kept;
- `lane change`: on the same road in lanes side by side, nearly parallel (MOBIL's change
  into a gap that closes, or the other car's);
- `moving backwards`: either car with a negative speed (highway-env's IDM brakes through
  zero);
- `left the road`: the ego's centre off every lane;
- `warm-up crash`: before the hand-over (the closed loop does not evaluate such a seed).

    python scripts/expert_failures.py --scenario roundabout --seed 2000 --episodes 20 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.closedloop import ClosedLoopWorld
from blockplan.sim.scenarios import get_scenario

ROUNDABOUT_ENTRIES = ("ser", "ses", "eer", "ees", "ner", "nes", "wer", "wes")
CROSSING_DEG = 35.0


def cause(ego: Any, other: Any) -> str:
    """The failure's cause from two highway-env vehicles at their collision."""
    if ego.speed < -0.1 or other.speed < -0.1:
        return "moving backwards"
    angle = abs(np.degrees((other.heading - ego.heading + np.pi) % (2 * np.pi) - np.pi))
    (a0, a1, ai), (b0, b1, bi) = ego.lane_index, other.lane_index
    if a0 in ROUNDABOUT_ENTRIES and b0 not in ROUNDABOUT_ENTRIES:
        return "entry without yielding"
    if (a0.startswith("ir") or b0.startswith("ir") or a1.startswith("il")) and angle > CROSSING_DEG:
        return "junction crossing"
    if (a0, a1) == (b0, b1) and ai != bi and angle <= CROSSING_DEG:
        return "lane change"
    return "other"


def failure(scenario: str, seed: int, duration_s: float) -> dict[str, Any] | None:
    """The expert's failure in one episode (time, cause, both vehicles), or None."""
    world = ClosedLoopWorld(get_scenario(scenario), seed)
    try:
        while world.t <= duration_s:
            world.step()
            if world.crashed and world.t <= 0:  # the closed loop does not evaluate the seed
                return {"seed": seed, "t": round(world.t, 2), "cause": "warm-up crash"}
            if world.crashed:
                ego = world.env.vehicle
                others = [v for v in world.env.road.vehicles if v is not ego]
                other = min(others, key=lambda v: np.linalg.norm(v.position - ego.position))
                return {
                    "seed": seed,
                    "t": round(world.t, 2),
                    "cause": cause(ego, other),
                    "ego": {"lane": list(ego.lane_index), "speed": round(float(ego.speed), 2)},
                    "other": {
                        "lane": list(other.lane_index),
                        "speed": round(float(other.speed), 2),
                    },
                }
            if world.t >= 0 and not world.on_road():
                return {"seed": seed, "t": round(world.t, 2), "cause": "left the road"}
        return None
    finally:
        world.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--seed", type=int, required=True, help="first seed")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds after the warm-up")
    parser.add_argument("--json", help="also write the failures here")
    args = parser.parse_args(argv)
    failures = []
    for seed in range(args.seed, args.seed + args.episodes):
        found = failure(args.scenario, seed, args.duration)
        if found is not None:
            failures.append(found)
            print(f"{seed}: {found['cause']} at {found['t']} s", flush=True)
    counts: dict[str, int] = {}
    for f in failures:
        counts[f["cause"]] = counts.get(f["cause"], 0) + 1
    print(f"{len(failures)} of {args.episodes} failed: {counts}")
    if args.json:
        doc = {"scenario": args.scenario, "episodes": args.episodes, "failures": failures}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
