"""What the open-loop bar is made of: ego-status MLPs on chosen inputs.

The ego-status MLP of `blockplan eval` reads the ego history (positions, velocities and
accelerations of the last seconds), the route command and the lane pose. On expert-driven
data the history's accelerations carry what the expert reacts to but no planner input
shows: the speed of the car ahead and the expert's own set speed, drawn per episode. This
script fits the same MLP recipe (`train.baselines.fit_waypoint_mlp`) on variants of the
input and prints the ADE@5s of each (the WOD-E2E JMT interpolation, as `blockplan eval`)
on the test split, per scenario:

- `history`: the eval's ego-status MLP with the lane pose (`ego_mlp_lane_pose`);
- `now`: only the current velocity instead of the history (no past motion);
- `+set_speed`: the expert's set speed (`sim.scenarios.expert_target_speed`) and its
  difference to the current speed;
- `+lead`: the gap to the car ahead in the ego's lane and its speed relative to the ego's
  (the data set's `lead`; no car ahead: gap 200 m, the ego's speed, a flag);
- `+route`: the route ahead as the ego encoder reads it (`model.ego.route_inputs`; the data
  set's `route_ahead`, docs/ALGORITHMS.md §3.8).

    python scripts/open_loop_information.py --data BASE --model models/blockplan-tiny \\
        --json OUT.json [--variants history now now+lead ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from blockplan.model.ego import route_inputs
from blockplan.sim.scenarios import SCENARIOS, expert_target_speed
from blockplan.train.baselines import fit_waypoint_mlp, predict_waypoints
from blockplan.train.evaluate import recipe_of_folder
from blockplan.train.examples import Examples, load_shards, read_manifest
from blockplan.trajectory import metrics, upsample

VARIANTS = (
    "history",
    "history+set_speed",
    "history+lead",
    "history+set_speed+lead",
    "now",
    "now+set_speed",
    "now+lead",
    "now+set_speed+lead",
    "history+route",
    "history+lead+route",
)
NO_LEAD_GAP_M = 200.0


def episode_parts(data: Examples) -> tuple[np.ndarray, np.ndarray]:
    """(N,) scenario names and (N,) seeds of the samples' episodes ("<scenario>-<seed>")."""
    parts = [str(e).rsplit("-", 1) for e in data.episode]
    return np.array([p[0] for p in parts]), np.array([int(p[1]) for p in parts])


def features(data: Examples, variant: str, num_commands: int) -> np.ndarray:
    """(N, F) inputs of `variant` ("history" or "now", then "+set_speed" / "+lead")."""
    base, *extras = variant.split("+")
    history = data.ego_history.astype(np.float64)  # (N, H, 6): x y vx vy ax ay
    speed = history[:, -1, 2:3]  # (N, 1) current forward speed
    if base == "history":
        parts = [history.reshape(len(history), -1)]
    elif base == "now":
        parts = [history[:, -1, 2:4]]
    else:
        raise ValueError(f"variant {variant!r}: starts with 'history' or 'now'")
    pose = data.lane_pose.astype(np.float64)
    known = np.isfinite(pose).all(axis=1, keepdims=True)
    parts += [np.eye(num_commands)[data.command], np.where(known, pose, 0.0), known.astype(float)]
    for extra in extras:
        if extra == "set_speed":
            names, seeds = episode_parts(data)
            target = np.array(
                [expert_target_speed(SCENARIOS[n], s) for n, s in zip(names, seeds, strict=True)]
            )[:, None]
            parts += [target, target - speed]
        elif extra == "lead":
            lead = data.lead.astype(np.float64)  # (N, 2) gap (inf: none), lead speed
            none = ~np.isfinite(lead[:, :1])
            gap = np.where(none, NO_LEAD_GAP_M, np.nan_to_num(lead[:, :1], nan=NO_LEAD_GAP_M))
            lead_speed = np.where(none, speed, np.nan_to_num(lead[:, 1:2], nan=0.0))
            parts += [gap, lead_speed - speed, none.astype(float)]
        elif extra == "route":
            route = torch.from_numpy(data.route_ahead.astype(np.float64))
            parts.append(route_inputs(route, (len(history),)).numpy())
        else:
            raise ValueError(f"variant {variant!r}: unknown input {extra!r}")
    return np.concatenate(parts, axis=-1)


def ade_5s(waypoints: np.ndarray, future_xy: np.ndarray) -> np.ndarray:
    """(N,) ADE@5s of (N, 5, 2) waypoints, JMT-upsampled as `blockplan eval` does."""
    return np.array(
        [
            metrics.ade_5s(upsample(w.astype(np.float64)).xy, gt.astype(np.float64))
            for w, gt in zip(waypoints, future_xy, strict=True)
        ]
    )


def information_table(
    train: Examples,
    test: Examples,
    num_commands: int,
    variants: list[str],
    steps: int = 2000,
    say=lambda line: None,
) -> dict[str, dict]:
    """Per variant: the test split's ADE@5s, overall and per scenario, of an MLP fitted on
    `train` with that variant's inputs; `say` gets a table line per variant."""
    scenario, _ = episode_parts(test)
    names = sorted(set(scenario))
    say(f"{'inputs':<26}{'ADE@5s':>8}" + "".join(f"{s[:12]:>13}" for s in names))
    rows = {}
    for variant in variants:
        net, scale = fit_waypoint_mlp(
            features(train, variant, num_commands), train.future_xy, steps=steps
        )
        predicted = predict_waypoints(net, scale, features(test, variant, num_commands))
        errors = ade_5s(predicted, test.future_xy)
        by = {s: round(float(errors[scenario == s].mean()), 3) for s in names}
        rows[variant] = {"ade_5s": round(float(errors.mean()), 3), "by_scenario": by}
        say(f"{variant:<26}{errors.mean():>8.2f}" + "".join(f"{v:>13.2f}" for v in by.values()))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a `blockplan dataset` folder")
    parser.add_argument("--model", required=True, help="model folder (its history rows)")
    parser.add_argument("--json", required=True, help="where to write the table")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=2000, help="MLP training steps (2000)")
    args = parser.parse_args(argv)
    recipe = recipe_of_folder(args.model)
    manifest = read_manifest(args.data)
    train = load_shards(args.data, "train", recipe, False, False, manifest)
    test = load_shards(args.data, "test", recipe, False, False, manifest)
    if not np.isfinite(train.lead[:, 1]).any():
        print("error: the data set records no lead car (an older data set)", file=sys.stderr)
        return 1
    num_commands = len(recipe.schema.route_commands)
    rows = information_table(train, test, num_commands, args.variants, args.steps, print)
    doc = {
        "data": str(args.data),
        "model": str(args.model),
        "test_samples": len(test),
        "rows": rows,
    }
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
