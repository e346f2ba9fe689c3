"""Open-loop evaluation on a held-out split: the model (scaffold_spec), N=4 shared-prefix
rollouts, and the two baselines fitted/evaluated on the same data set (docs/ALGORITHMS.md §9).

Per method: ADE@3s / ADE@5s (WOD-E2E: the 5 waypoints JMT-upsampled to 20 points at 4 Hz
against the true 4 Hz future), L2 at 1/2/3 s in the UniAD convention (`l2_1s` …, error at t)
and the ST-P3 convention (`l2_stp3_1s` …, mean error up to t), the collision rate (ego box
along the plan vs the other agents' true future boxes, from a deterministic re-simulation of
each test episode), and for the model the meta-behaviour accuracy (both fields right) and
the critical-object micro-F1. Rollouts are JMT-upsampled, filtered by consensus
(`consensus_rollouts`, `rollouts.max_deviation_m`) and averaged (`average_rollouts`); the
extra row `rollouts_n4_plain_mean` averages all N of the same plans.

`gate_pass_rate` is what the runtime would publish rather than fall back: the published path
(the same rollouts through the runtime's jerk-minimizing fit, `trajectory.waypoint_tolerance_m`)
against the hard `gates`; `comfort_pass_rate` the same path against the `comfort` limits;
both also per scenario (`gate_pass_rate_by_scenario`, `comfort_pass_rate_by_scenario`), as
are the ADEs (`ade_3s_by_scenario`, `ade_5s_by_scenario`: where a model wins or loses).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from blockplan.config import (
    ComfortConfig,
    GateConfig,
    PlannerConfig,
    TrajectoryOutputConfig,
    with_overrides,
)
from blockplan.model.planner_model import PlannerModelConfig
from blockplan.model.weights import read_config
from blockplan.planner.parts import schema_from
from blockplan.planner.planner import Planner
from blockplan.schema import SECTION_NAMES, ScaffoldParseError, load_tokenizer
from blockplan.train.baselines import EgoMLP, constant_velocity
from blockplan.train.collision import ReplayMismatch, check_replay, plan_collides, replay_episode
from blockplan.train.examples import load_shards, read_manifest, shard_known_sections
from blockplan.train.recipe import Recipe
from blockplan.trajectory import (
    average_rollouts,
    check_gates,
    consensus_rollouts,
    metrics,
    smooth_upsample,
    upsample,
)
from blockplan.types import CRITICAL_OBJECT_KEYS, DrivingAnswer, Trajectory

log = logging.getLogger(__name__)
METHODS = ("model", "rollouts_n4", "constant_velocity", "ego_mlp")
CRITICAL_SECTION = SECTION_NAMES.index("critical_objects")
# Extra rows: N=4 rollouts averaged without the consensus filter (same plans, no decoding),
# and the ground-truth waypoints themselves through the same JMT upsampling (the floor of the
# protocol's ADE, and how often the expert's own plan passes the validity gates).
# The ego-status MLP that also reads the lane pose: the bar for a model that does; and the
# one that also reads the car ahead (`ego_mlp_lead`): the bar for a model that reads both;
# and the one that reads the lanes beside as well (`ego_mlp_beside`; on data sets written
# before they were recorded its 18 extra inputs are constant, and it differs from
# `ego_mlp_lead` only by its random init); and the one that reads the route ahead as well
# (`ego_mlp_route`: the bar for a model that reads the router's path; constant inputs on data
# sets written before it was recorded, likewise).
EXTRA = (
    "rollouts_n4_plain_mean",
    "expert_waypoints",
    "ego_mlp_lane_pose",
    "ego_mlp_lead",
    "ego_mlp_beside",
    "ego_mlp_route",
)
# The smallest ADE@5s of every ego-status MLP row and seed (`blind_best`): the bar the model's
# N = 4 rollouts must clear by a margin, overall and per scenario.
BLIND_BEST = "blind_best"
GATES = GateConfig()  # the shipped hard limits: `gate_pass_rate` is what the runtime publishes
COMFORT = ComfortConfig()  # the shipped comfort limits (reported, never a fallback)
OUTPUT = TrajectoryOutputConfig()  # the published path's fit (waypoint tolerance)


def published(waypoints: np.ndarray) -> Trajectory:
    """The runtime's published path of (K, 5, 2) rollouts (their fits averaged)."""
    tolerance = OUTPUT.waypoint_tolerance_m
    return average_rollouts([smooth_upsample(w, tolerance) for w in waypoints]).mean


def recipe_of_folder(folder: str | Path) -> Recipe:
    """The recipe (schema, tokenizer, model config) a model folder was trained with."""
    config = PlannerModelConfig.from_dict(read_config(folder))
    return Recipe(config, schema_from(config.schema), load_tokenizer(Path(folder)))


def trajectory_metrics(pred_xy: np.ndarray, gt_xy: np.ndarray) -> dict[str, float]:
    out = {"ade_3s": metrics.ade_3s(pred_xy, gt_xy), "ade_5s": metrics.ade_5s(pred_xy, gt_xy)}
    for t in (1, 2, 3):
        out[f"l2_{t}s"] = metrics.l2_at_uniad(pred_xy, gt_xy, t)
        out[f"l2_stp3_{t}s"] = metrics.l2_at_stp3(pred_xy, gt_xy, t)
    return out


class Tally:
    """Per-method sums of per-sample metrics, critical-object counts and failures."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.count = 0
        self.collisions = 0
        self.collision_checked = 0
        self.meta_right = 0
        self.crit = np.zeros(3)  # true positives, false positives, false negatives
        self.crit_samples = 0  # samples whose critical objects are labels
        self.parse_failures = 0
        self.latency_ms: list[float] = []
        self.gates_passed = 0
        self.comfort_passed = 0
        self.by_scenario: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.ade_by_scenario: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(2))

    def add_trajectory(self, traj, gt_xy, t0: float, world, path, scenario: str) -> None:
        """traj: the WOD-E2E interpolation (metrics); path: the published path (gates)."""
        found = trajectory_metrics(traj.xy, gt_xy)
        for k, v in found.items():
            self.sums[k] += v
        self.ade_by_scenario[scenario] += (found["ade_3s"], found["ade_5s"])
        self.count += 1
        passed, comfortable = check_gates(path, GATES).ok, check_gates(path, COMFORT).ok
        self.gates_passed += passed
        self.comfort_passed += comfortable
        row = self.by_scenario[scenario]
        row[0], row[1], row[2] = row[0] + 1, row[1] + passed, row[2] + comfortable
        if world is not None:
            self.collision_checked += 1
            self.collisions += plan_collides(traj, t0, world)

    def add_answer(
        self, answer: DrivingAnswer, truth: DrivingAnswer, critical_known: bool = True
    ) -> None:
        """`critical_known` False: the sample's critical objects are no label (a bag's)."""
        self.meta_right += (answer.longitudinal, answer.lateral) == (
            truth.longitudinal,
            truth.lateral,
        )
        if not critical_known:
            return
        self.crit_samples += 1
        for k in CRITICAL_OBJECT_KEYS:
            p, t = answer.critical_objects[k], truth.critical_objects[k]
            self.crit += [p and t, p and not t, t and not p]

    def result(self, with_answers: bool) -> dict[str, Any]:
        n = max(self.count, 1)
        out: dict[str, Any] = {k: v / n for k, v in sorted(self.sums.items())}
        out["collision_rate"] = (
            self.collisions / self.collision_checked if self.collision_checked else None
        )
        out["gate_pass_rate"] = self.gates_passed / n
        out["comfort_pass_rate"] = self.comfort_passed / n
        scenarios = sorted(self.by_scenario.items())
        out["gate_pass_rate_by_scenario"] = {k: r[1] / r[0] for k, r in scenarios}
        out["comfort_pass_rate_by_scenario"] = {k: r[2] / r[0] for k, r in scenarios}
        for i, name in enumerate(("ade_3s", "ade_5s")):
            out[f"{name}_by_scenario"] = {
                k: float(self.ade_by_scenario[k][i]) / r[0] for k, r in scenarios
            }
        out["num_samples"] = self.count
        if with_answers:
            tp, fp, fn = self.crit
            out["meta_accuracy"] = self.meta_right / max(self.count - self.parse_failures, 1)
            out["critical_f1"] = (  # None: no sample with labelled critical objects
                float(2 * tp / max(2 * tp + fp + fn, 1)) if self.crit_samples else None
            )
            out["parse_failures"] = self.parse_failures
            out["mean_latency_ms"] = float(np.mean(self.latency_ms)) if self.latency_ms else None
        return out


def _planner(
    folder: Path, strategy: str, num_rollouts: int, overrides: Sequence[str] = ()
) -> Planner:
    base = with_overrides(PlannerConfig(), overrides)
    recipe = recipe_of_folder(folder)
    cameras = tuple(c for c in base.cameras if c.name in recipe.model_config.camera_names)
    config = dataclasses.replace(
        base,
        cameras=cameras,
        frame_window=dataclasses.replace(
            base.frame_window, num_frames=recipe.model_config.num_frames
        ),
        decoding=dataclasses.replace(base.decoding, strategy=strategy),
        rollouts=dataclasses.replace(base.rollouts, num_rollouts=num_rollouts),
    )
    return Planner.from_folder(folder, config)


def evaluate(
    data_dir: str | Path,
    model_dir: str | Path,
    split: str = "test",
    max_samples: int | None = None,
    num_rollouts: int = 4,
    check_collisions: bool = True,
    progress: bool = True,
    mlp_steps: int = 2000,
    overrides: Sequence[str] = (),
    mlp_seeds: int = 1,
) -> dict[str, Any]:
    """The four methods' metrics on `split` (every sample, or `max_samples` evenly spaced).
    `overrides`: `--set NAME=VALUE` planner parameters of the model rows (e.g.
    `rollouts.temperature=1.0`); the strategies and N are the evaluation's own.
    `mlp_seeds` > 1 also fits the ego-status MLP with seeds 1..mlp_seeds-1: the `ego_mlp` row
    stays seed 0's, and its `ade_5s_over_seeds` lists every seed's ADE@5s (how far the bar
    moves with the fit's seed alone)."""
    if mlp_seeds < 1:
        raise ValueError(f"mlp_seeds={mlp_seeds}: must be >= 1")
    from blockplan.sim.dataset import load_shard, sample_answer, sample_observation

    data_dir, model_dir = Path(data_dir), Path(model_dir)
    recipe = recipe_of_folder(model_dir)
    planners = {  # loaded (and their weights verified) before minutes of data loading
        "model": _planner(model_dir, "scaffold_spec", 1, overrides),
        "rollouts_n4": _planner(model_dir, "rollouts", num_rollouts, overrides),
    }
    manifest = read_manifest(data_dir)
    test = load_shards(data_dir, split, recipe, progress, False, manifest)
    train = load_shards(data_dir, "train", recipe, progress, False, manifest)
    num_commands = len(recipe.schema.route_commands)
    t_fit = time.perf_counter()
    mlp = EgoMLP.fit(train, num_commands, steps=mlp_steps)
    log.info("ego MLP fitted on %d samples in %.1f s", len(train), time.perf_counter() - t_fit)
    mlp_lane = EgoMLP.fit(train, num_commands, steps=mlp_steps, lane_pose=True)
    mlp_lead = EgoMLP.fit(train, num_commands, steps=mlp_steps, lane_pose=True, lead=True)
    mlp_beside = EgoMLP.fit(
        train, num_commands, steps=mlp_steps, lane_pose=True, lead=True, beside=True
    )
    mlp_route = EgoMLP.fit(
        train, num_commands, steps=mlp_steps, lane_pose=True, lead=True, beside=True, route=True
    )
    other_seeds = [
        EgoMLP.fit(train, num_commands, steps=mlp_steps, seed=seed).predict(test)
        for seed in range(1, mlp_seeds)
    ]
    seed_tallies = [Tally() for _ in other_seeds]
    entries = [e for e in manifest["episodes"] if e["split"] == split]
    refs = [(e, i) for e in entries for i in range(e["num_samples"])]
    keep = np.arange(len(refs))
    if max_samples is not None and max_samples < len(refs):
        keep = np.unique(np.linspace(0, len(refs) - 1, max_samples).round().astype(int))
    baselines = {
        "constant_velocity": constant_velocity(test),
        "ego_mlp": mlp.predict(test),
        "ego_mlp_lane_pose": mlp_lane.predict(test),
        "ego_mlp_lead": mlp_lead.predict(test),
        "ego_mlp_beside": mlp_beside.predict(test),
        "ego_mlp_route": mlp_route.predict(test),
    }
    tallies = {m: Tally() for m in METHODS + EXTRA}
    expert = tallies["expert_waypoints"]
    shards: dict[str, dict] = {}
    worlds: dict[str, Any] = {}
    duration = (manifest.get("options") or {}).get("duration_s")  # a bag set has none: no re-sim
    duration = None if duration is None else float(duration)
    for k in tqdm(keep, desc=f"eval {split}", unit="sample", disable=not progress):
        entry, i = refs[k]
        name = entry["shard"]
        if name not in shards:
            shards.clear()
            shards[name] = load_shard(data_dir / name)
        shard = shards[name]
        obs, truth = sample_observation(shard, i), sample_answer(shard, i)
        critical_known = bool(shard_known_sections(shard)[i, CRITICAL_SECTION])
        gt_xy = shard["future_xy"][i].astype(np.float64)
        t0 = obs.stamp_ns / 1e9
        world = _world(worlds, entry, duration, t0, gt_xy) if check_collisions else None
        scenario = entry["scenario"]
        truth_wp = shard["waypoints"][i].astype(np.float64)
        expert.add_trajectory(
            upsample(truth_wp), gt_xy, t0, world, published(truth_wp[None]), scenario
        )
        for method, planner in planners.items():
            tally = tallies[method]
            start = time.perf_counter()
            try:
                plan = planner.plan(obs)
            except ScaffoldParseError as e:
                tally.parse_failures += 1
                log.warning("%s: parse failure on %s[%d]: %s", method, name, i, e)
                plan = None
            tally.latency_ms.append((time.perf_counter() - start) * 1e3)
            if plan is None:  # counted; scored as the constant-velocity fallback
                cv = baselines["constant_velocity"][k]
                traj, path = upsample(cv), published(cv[None])
            else:
                kept = consensus_rollouts(plan.rollouts, planner.config.rollouts.max_deviation_m)
                traj = average_rollouts([upsample(plan.rollouts[i]) for i in kept]).mean
                path = published(plan.rollouts[kept])
                if method == "rollouts_n4":  # the plain mean of all N too, for comparison
                    plain = average_rollouts([upsample(r) for r in plan.rollouts]).mean
                    tallies["rollouts_n4_plain_mean"].add_trajectory(
                        plain, gt_xy, t0, world, published(plan.rollouts), scenario
                    )
                tally.add_answer(plan.answer, truth, critical_known)
            tally.add_trajectory(traj, gt_xy, t0, world, path, scenario)
        for tally, waypoints in [
            *((tallies[method], w) for method, w in baselines.items()),
            *zip(seed_tallies, other_seeds, strict=True),
        ]:
            wp = waypoints[k]
            tally.add_trajectory(upsample(wp), gt_xy, t0, world, published(wp[None]), scenario)
    results = {m: tallies[m].result(with_answers=m in planners) for m in METHODS + EXTRA}
    seed_results = [t.result(with_answers=False) for t in seed_tallies]
    if seed_results:
        results["ego_mlp"]["ade_5s_over_seeds"] = [results["ego_mlp"]["ade_5s"]] + [
            r["ade_5s"] for r in seed_results
        ]
    for name in ("rollouts_n4", "rollouts_n4_plain_mean"):  # the keys keep their name
        results[name]["num_rollouts"] = num_rollouts
    results[BLIND_BEST] = blind_best(
        {k: r for k, r in results.items() if k.startswith("ego_mlp")}
        | {f"ego_mlp seed {i}": r for i, r in enumerate(seed_results, 1)}
    )
    return results


def blind_best(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The best blind bar: the smallest ADE@5s of the ego-status MLP rows (every variant,
    every fit seed), overall and per scenario, each with the row it came from. Not a method:
    no row of its own in the tables."""
    overall = min(rows, key=lambda k: rows[k]["ade_5s"])
    scenarios = sorted({s for r in rows.values() for s in r.get("ade_5s_by_scenario", {})})
    per, per_row = {}, {}
    for s in scenarios:
        have = {
            k: r["ade_5s_by_scenario"][s]
            for k, r in rows.items()
            if s in r.get("ade_5s_by_scenario", {})
        }
        per_row[s] = min(have, key=have.__getitem__)
        per[s] = have[per_row[s]]
    return {
        "ade_5s": rows[overall]["ade_5s"],
        "row": overall,
        "ade_5s_by_scenario": per,
        "row_by_scenario": per_row,
    }


def _world(cache: dict, entry: dict, duration: float | None, t0: float, gt_xy: np.ndarray):
    """The re-simulated episode of `entry` (cached), or None when it cannot be reproduced."""
    key = entry["shard"]
    if key not in cache:
        cache.clear()
        cache[key] = None
        if duration is not None:
            cache[key] = replay_episode(entry["scenario"], int(entry["seed"]), duration)
    world = cache[key]
    if world is None:
        return None
    try:
        check_replay(world, t0, gt_xy)
    except ReplayMismatch as e:
        log.warning("%s: %s; no collision check for this episode", key, e)
        cache[key] = None
        return None
    return world


def summary_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """A table of `evaluate`'s results for a terminal: per method ADE@3s/@5s, ADE@5s per
    scenario, the hard-gate pass rate, and the parse failures of the model's rows."""
    best = results.get(BLIND_BEST)
    results = {k: r for k, r in results.items() if k != BLIND_BEST}
    scenarios = sorted({k for r in results.values() for k in r.get("ade_5s_by_scenario", {})})
    head = f"{'method':<24}{'ADE@3s':>8}{'ADE@5s':>8}" + "".join(f"{s[:12]:>13}" for s in scenarios)
    lines = [head + f"{'gates':>8}{'parse':>7}", f"{'':<40}" + "ADE@5s per scenario (m)"]
    for name, r in results.items():
        if "num_rollouts" in r:  # `--rollouts N`: the row says its N
            name = name.replace("_n4", f"_n{r['num_rollouts']}")
        per = r.get("ade_5s_by_scenario", {})
        cells = "".join(f"{per[s]:>13.2f}" if s in per else f"{'-':>13}" for s in scenarios)
        parse = r.get("parse_failures")
        lines.append(
            f"{name:<24}{r['ade_3s']:>8.2f}{r['ade_5s']:>8.2f}{cells}"
            f"{r['gate_pass_rate']:>8.1%}{'-' if parse is None else parse:>7}"
        )
    seeds = results.get("ego_mlp", {}).get("ade_5s_over_seeds")
    if seeds:
        lines.append(
            f"ego_mlp over {len(seeds)} fit seeds: ADE@5s mean {np.mean(seeds):.2f} "
            f"(min {min(seeds):.2f}, max {max(seeds):.2f})"
        )
    if best:
        lines.append(f"best blind bar (every ego_mlp row and seed): ADE@5s {best['ade_5s']:.2f}")
    lines.append(f"{results[next(iter(results))]['num_samples']} samples")
    return lines
