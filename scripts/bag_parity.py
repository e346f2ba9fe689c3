"""Bag-derived samples against the simulator's own (docs/BENCHMARKS.md "Training sets from
bags"): per scenario and seed, `blockplan simulate` writes the episode's bag and `blockplan
dataset` the simulator's samples of the same episode; `build_bag_dataset` labels the bag,
once with its lane pose and once without (the trajectory-only lateral rule). Prints, per
episode, the samples compared, the largest trajectory difference (m), how many prompts are
token for token the simulator's, and how many answers' known sections (meta behaviour,
trajectory) are.

    python scripts/bag_parity.py OUT --duration 20 highway:3 merge:1 intersection:7
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def compare(sim_dir: Path, bag_dir: Path, recipe) -> dict:
    from blockplan.schema import SECTION_NAMES
    from blockplan.train.examples import load_shards
    from blockplan.train.noising import NoiseLayout

    sim = load_shards(sim_dir, "train", recipe, with_images=False)
    bag = load_shards(bag_dir, "train", recipe, with_images=False)
    at = {int(s): i for i, s in enumerate(sim.stamp_ns)}
    section = NoiseLayout.from_scaffold(recipe.scaffold).section
    keep = np.isin(section, [SECTION_NAMES.index(n) for n in ("future_meta_behavior",)])
    traj = section == SECTION_NAMES.index("trajectory")
    rows = [(i, at[int(s)]) for i, s in enumerate(bag.stamp_ns)]
    diff = max(float(np.abs(bag.future_xy[i] - sim.future_xy[j]).max()) for i, j in rows)
    return {
        "samples": len(rows),
        "max_traj_diff_m": diff,
        "prompts_equal": sum(np.array_equal(bag.prompt_ids[i], sim.prompt_ids[j]) for i, j in rows),
        "meta_equal": sum(
            np.array_equal(bag.answer_ids[i][keep], sim.answer_ids[j][keep]) for i, j in rows
        ),
        "trajectory_tokens_equal": sum(
            np.array_equal(bag.answer_ids[i][traj], sim.answer_ids[j][traj]) for i, j in rows
        ),
    }


def main(out: str, episodes: list[str], duration: float) -> None:
    from blockplan.cli import main as cli
    from blockplan.config import default_params_path, load_config
    from blockplan.replay.dataset import build_bag_dataset
    from blockplan.schema import default_schema
    from blockplan.train.recipe import Recipe

    root = Path(out)
    cams = ("front_left", "front", "front_right", "rear")
    recipe = Recipe.build("reference", cams, 2, schema=default_schema())
    no_lane = load_config(default_params_path(), overrides=["topics.lane_pose=/no_lane_pose"])
    for spec in episodes:
        scenario, seed = spec.split(":")
        d = root / f"{scenario}-{seed}"
        common = ["--duration", f"{duration:g}", "--out"]
        if not (d / "sim" / "manifest.json").is_file():
            args = ["dataset", "--scenario", scenario, "--episodes", "1", "--seed-base", seed]
            args += ["--val-fraction", "0", "--test-fraction", "0", "--no-export"]
            assert cli([*args, *common, str(d / "sim")]) == 0
        entry = json.loads((d / "sim" / "manifest.json").read_text())["episodes"][0]
        if not (d / "bag").exists():
            args = ["simulate", "--scenario", scenario, "--seed", str(entry["seed"])]
            assert cli([*args, *common, str(d / "bag")]) == 0
        with_lane = build_bag_dataset([d / "bag"], d / "from-bag")
        without = build_bag_dataset([d / "bag"], d / "from-bag-no-lane", no_lane)
        a, b = compare(d / "sim", with_lane, recipe), compare(d / "sim", without, recipe)
        a["meta_equal_without_lane_pose"] = b["meta_equal"]
        print(json.dumps({"episode": f"{scenario}-{entry['seed']}", **a}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="work folder (bags and data sets; reused when there)")
    parser.add_argument("episodes", nargs="+", help="SCENARIO:SEED")
    parser.add_argument("--duration", type=float, default=9.5, help="seconds per episode")
    args = parser.parse_args()
    main(args.out, args.episodes, args.duration)
