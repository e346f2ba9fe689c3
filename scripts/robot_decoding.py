"""A robot model's decoding strategies on real observations (docs/BENCHMARKS.md "Robots",
"Decoding"): action MAE against the data set's chunks, forwards per chunk, p50 latency and,
for `pipelined`, the blocks in flight per forward; with `--confidences`, the max-bin
confidence of every undecided value each forward sees, per block.

    python scripts/robot_decoding.py MODEL_DIR DATA_DIR [--samples 100] [--splits val test]
        [--run NAME:STRATEGY[:KEY=VALUE,...]] ... [--confidences] [--backend torch]
        [--json out.json]

Default runs: section_diffusion, full_diffusion and pipelined at the shipped thresholds
and at the former (add 0.3, activate 0.7). KEY=VALUE are params (`pipeline.add_threshold=1`).
The samples are evenly spaced over every step of every episode of the splits; the runs
plan each sample round-robin (the machine may be shared); dMAE is paired against the first.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml

import blockplan.decoding.pipelined as pipelined_module
import blockplan.decoding.strategies as strategies_module
from blockplan.config import PlannerConfig
from blockplan.planner.embodiment import robot_config
from blockplan.planner.planner import Planner
from blockplan.train.robot_examples import RobotRecipe, load_robot_examples
from blockplan.types import CameraFrame, RobotObservation

DEFAULT_RUNS = (
    "section_diffusion:section_diffusion",
    "full_diffusion:full_diffusion",
    "pipelined:pipelined",
    "pipelined_0.3_0.7:pipelined:pipeline.add_threshold=0.3,pipeline.activate_threshold=0.7",
)


def parse_run(text: str) -> tuple[str, str, dict]:
    name, strategy, *rest = text.split(":")
    params = {}
    for item in rest[0].split(",") if rest and rest[0] else []:
        key, value = item.split("=", 1)
        params[key] = yaml.safe_load(value)
    return name, strategy, params


class ConfidenceLog:
    """Wraps `commit_confident`: the max-bin confidence (under the constraints) of every
    undecided value at each call, by block, and how many values the call committed."""

    def __init__(self, blocks) -> None:
        self.block_of = np.zeros(blocks[-1].end, dtype=int)
        for j, b in enumerate(blocks):
            self.block_of[b.start : b.end] = j
        self.confidences: dict[int, list[float]] = defaultdict(list)
        self.committed: dict[int, list[int]] = defaultdict(list)
        self.original = strategies_module.commit_confident

    def __enter__(self) -> ConfidenceLog:
        def logged(ctx, state, start, logits, threshold, minimum=1):
            n = logits.shape[1]
            unknown = ~state.is_known[0, start : start + n]
            rows = logits[0].cpu().double().clone()
            for i in unknown.nonzero().flatten().tolist():
                allowed = ctx.constraints.allowed(start + i, state.tokens[0].numpy())
                rows[i] = rows[i].masked_fill(~torch.from_numpy(allowed), float("-inf"))
            conf = torch.softmax(rows[unknown], dim=-1).max(dim=-1).values.tolist()
            before = state.is_known[0, start : start + n].clone()
            self.original(ctx, state, start, logits, threshold, minimum)
            new = (state.is_known[0, start : start + n] & ~before).numpy()
            blocks = self.block_of[start : start + n]
            for p, c in zip(unknown.nonzero().flatten().tolist(), conf, strict=True):
                self.confidences[int(blocks[p])].append(c)
            for j in np.unique(blocks[unknown.numpy()]):  # one forward of each open block
                self.committed[int(j)].append(int(new[blocks == j].sum()))

        strategies_module.commit_confident = pipelined_module.commit_confident = logged
        return self

    def __exit__(self, *exc) -> None:
        strategies_module.commit_confident = self.original
        pipelined_module.commit_confident = self.original

    def summary(self, plans: int) -> dict[str, dict[str, float]]:
        out = {}
        for j in sorted(self.confidences):
            c = np.asarray(self.confidences[j])
            out[str(j)] = {
                "median": round(float(np.median(c)), 3),
                "above_0.9": round(float(np.mean(c > 0.9)), 3),
                "above_0.5": round(float(np.mean(c > 0.5)), 3),
                "committed_per_forward": round(float(np.mean(self.committed[j])), 2),
                "forwards_per_plan": round(len(self.committed[j]) / plans, 2),
            }
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--splits", nargs="+", default=["val", "test"])
    ap.add_argument("--run", action="append", default=None, help="NAME:STRATEGY[:K=V,...]")
    ap.add_argument("--confidences", action="store_true")
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recipe = RobotRecipe.of_folder(args.model, args.data)
    parts = [load_robot_examples(args.data, split, recipe) for split in args.splits]
    images = np.concatenate([p.images for p in parts])
    actions = np.concatenate([p.actions for p in parts])
    proprio = np.concatenate([p.proprio for p in parts])
    instruction = np.concatenate([p.instruction for p in parts])
    picked = np.linspace(0, len(actions) - 1, min(args.samples, len(actions))).astype(int)
    mc = recipe.model_config
    params = {"model.backend": args.backend, "model.num_threads": 1}
    config = robot_config(PlannerConfig().with_params(params), mc.camera_names, mc.num_frames)
    planner = Planner.from_folder(Path(args.model), config)
    runs = []
    for text in args.run or DEFAULT_RUNS:
        name, strategy, overrides = parse_run(text)
        sibling = planner.config.with_params(overrides) if overrides else None
        runs.append(
            (name, strategy, planner.sibling(sibling, planner.runner) if sibling else planner)
        )
    T = mc.num_frames
    rows = {name: defaultdict(list) for name, _, _ in runs}
    logs = {name: ConfidenceLog(planner.scaffold.blocks) for name, _, _ in runs}
    for i in picked:
        frames = tuple(
            CameraFrame(mc.camera_names[j // T], 0, images[i, j]) for j in range(images.shape[1])
        )
        obs = RobotObservation(0, frames, proprio[i], str(instruction[i]))
        for name, strategy, runner in runs:
            if args.confidences:
                with logs[name]:
                    decoded = runner.decode(obs, strategy)
            t0 = time.perf_counter()
            decoded = runner.decode(obs, strategy)
            row = rows[name]
            row["ms"].append((time.perf_counter() - t0) * 1e3)
            row["error"].append(float(np.abs(decoded.plan.actions - actions[i]).mean()))
            row["forwards"].append(decoded.result.num_forwards)
            if decoded.result.active_blocks:
                row["active"].append(float(np.mean(decoded.result.active_blocks)))
    first = np.asarray(rows[runs[0][0]]["error"])
    report = {"samples": len(picked), "splits": args.splits, "runs": {}}
    print(f"{len(picked)} samples of {len(actions)} ({', '.join(args.splits)}), {args.backend}")
    for name, strategy, _ in runs:
        row = rows[name]
        error = np.asarray(row["error"])
        paired = error - first
        entry = {
            "strategy": strategy,
            "action_mae": round(float(error.mean()), 4),
            "d_mae_vs_first": round(float(paired.mean()), 4),
            "d_mae_se": round(float(paired.std(ddof=1) / np.sqrt(len(paired))), 4),
            "forwards_per_chunk": round(float(np.mean(row["forwards"])), 2),
            "p50_ms": round(float(np.median(row["ms"])), 2),
        }
        if row["active"]:
            entry["mean_active_blocks"] = round(float(np.mean(row["active"])), 2)
        if args.confidences:
            entry["confidences_by_block"] = logs[name].summary(len(picked))
        report["runs"][name] = entry
        print(
            f"{name:24s} MAE {entry['action_mae']:.4f}  dMAE {entry['d_mae_vs_first']:+.4f} "
            f"(se {entry['d_mae_se']:.4f})  forwards {entry['forwards_per_chunk']:5.2f}  "
            f"p50 {entry['p50_ms']:6.1f} ms"
            + (
                f"  blocks in flight {entry['mean_active_blocks']:.2f}"
                if "mean_active_blocks" in entry
                else ""
            )
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
