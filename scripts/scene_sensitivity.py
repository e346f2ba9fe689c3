"""Does a driving model's decoder read its scene token? (docs/ALGORITHMS.md §3.5)

    python scripts/scene_sensitivity.py MODEL BAG [--every 5] [--json OUT]

A model trained with `--vision-scene-token` says, in one visual token per image, the gap to
the car ahead that its scene head reads from the front camera. This plans the observations
replay builds from BAG (ideal timing, every `--every`-th) with `scaffold_spec` several
times: once as the model is, then with the front camera's newest scene numbers forced to a
fixed gap (no car, 100, 60, 30, 15 m). For each it prints the mean 5 s displacement of the
plan, how many explanations name a car, and the longitudinal decisions. A decoder that
reads the token drives shorter and names a car when told one is 15 m ahead; one that
ignores it plans the same whatever the token says.

The torch backend without streaming, so that every plan runs the scene head on all K*T
images in one call (a forward hook replaces the front camera's newest row).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from blockplan.config import default_params_path, load_config
from blockplan.planner.planner import Planner
from blockplan.replay.observations import bag_observations
from blockplan.train.probe import LEAD_FAR_M, LEAD_MIN_M, LEAD_NEAR_M, LEAD_SCALE

GAPS_M = (float("inf"), 100.0, 60.0, 30.0, 15.0)


def scene_units(gap_m: float) -> torch.Tensor:
    """The scene head's two numbers (its training targets, in their units) for a gap."""
    near = 0.0 if np.isinf(gap_m) else LEAD_NEAR_M / max(gap_m, LEAD_MIN_M)
    far = min(gap_m, LEAD_FAR_M) / LEAD_FAR_M
    return torch.tensor([near / LEAD_SCALE[0], far / LEAD_SCALE[1]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("bag")
    parser.add_argument("--every", type=int, default=5, help="plan every n-th observation")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = ["model.backend=torch", "frame_window.streaming=off", "model.num_threads=1"]
    config = load_config(default_params_path(), overrides=overrides)
    planner = Planner.from_folder(Path(args.model), config)
    mc = planner.model.config
    if not mc.vision.scene:
        raise SystemExit(f"{args.model}: the model has no scene token")
    lane = getattr(planner, "reads_lane_pose", False)
    lead = getattr(planner, "reads_lead", False)
    observations = bag_observations(args.bag, planner.config, planner.schema, lane, lead)
    observations = observations[:: args.every]
    images = len(mc.camera_names) * mc.num_frames
    front = mc.camera_names.index("front") * mc.num_frames + mc.num_frames - 1
    forced: dict[str, torch.Tensor | None] = {"numbers": None}

    def hook(module, inputs, out):
        if forced["numbers"] is None:
            return out
        if out.shape[0] != images:
            raise RuntimeError(f"the scene head ran on {out.shape[0]} images, not {images}")
        out = out.clone()
        out[front] = forced["numbers"].to(out.dtype)
        return out

    planner.model.visual.encoder.scene_head.register_forward_hook(hook)
    rows = []
    for gap in (None, *GAPS_M):
        forced["numbers"] = None if gap is None else scene_units(gap)
        displacement, cars, decisions = [], 0, Counter()
        for obs in observations:
            planner.previous_answer = None
            answer = planner.decode(obs, "scaffold_spec").plan
            displacement.append(float(np.linalg.norm(answer.rollouts[0, -1])))
            cars += "car" in answer.answer.explanation.lower()
            decisions[answer.answer.longitudinal.name] += 1
        label = "as is" if gap is None else ("no car" if np.isinf(gap) else f"{gap:.0f} m")
        row = {
            "token": label,
            "mean_5s_displacement_m": round(float(np.mean(displacement)), 2),
            "names_a_car": cars,
            "plans": len(observations),
            "longitudinal": dict(sorted(decisions.items())),
        }
        rows.append(row)
        print(
            f"{label:>7}: 5 s displacement {row['mean_5s_displacement_m']:7.2f} m, "
            f"names a car {cars}/{len(observations)}, {row['longitudinal']}",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "bag": args.bag, "rows": rows}))


if __name__ == "__main__":
    main()
