"""Choose one model among candidates by closed loop on validation seeds.

`recipe select` drives every candidate model folder with `blockplan closed-loop`, beside the
expert (so that no progress counts), in each scenario over the same validation seeds. It
ranks the candidates by collisions, then failed episodes (a collision, a lane departure or
no progress), then mean |jerk|, all summed or averaged over the scenarios, and copies the
first into OUT/model; OUT/selection.json keeps every candidate's numbers and the rule. Each
candidate's run is kept (OUT/candidates/), so an interrupted selection continues where it
stopped. The seeds must be validation seeds: the choice is made on them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from blockplan.recipes.errors import RecipeError

SELECTION = "selection.json"
RULE = "fewest collisions, then fewest failed episodes, then the smallest mean |jerk|"


def _run_file(out: Path, index: int, scenario: str) -> Path:
    return out / "candidates" / f"{index}-{scenario}.json"


def _finished(path: Path, model: str, seeds: list[int], duration: float) -> bool:
    """Is `path` a closed-loop run of this model on these seeds (an earlier, complete one)?"""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    run = doc.get("run", {}) if isinstance(doc, dict) else {}
    done = run.get("seeds", []) + run.get("skipped_seeds_expert_crashed_in_warmup", [])
    return (
        run.get("model") == model
        and sorted(done) == seeds
        and run.get("duration_s") == duration
        and "model" in doc
    )


def _drive(model: str, scenario: str, episodes: int, seed: int, duration: float, path: Path):
    command = [
        sys.executable,
        "-m",
        "blockplan.cli",
        "closed-loop",
        "--scenario",
        scenario,
        "--episodes",
        str(episodes),
        "--seed",
        str(seed),
        "--duration",
        str(duration),
        "--policies",
        "model",
        "expert",
        "--model",
        model,
        "--no-progress",
        "--json",
        str(path),
    ]
    log = path.with_suffix(".log")
    with open(log, "w") as f:
        f.write("$ blockplan " + " ".join(command[3:]) + "\n")
        f.flush()
        code = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT)
    if code != 0:
        raise RecipeError(f"select: `blockplan closed-loop` on {model} exited {code} (see {log})")


def candidate_summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One candidate's numbers over its scenario runs: episode counts summed, jerk averaged
    over the episodes."""
    totals = {"episodes": 0, "collisions": 0, "departures": 0, "no_progress": 0, "failed": 0}
    jerk = 0.0
    for doc in runs.values():
        m = doc["model"]
        k = m["episodes"]
        totals["episodes"] += k
        totals["collisions"] += round(m["collision_rate"] * k)
        totals["departures"] += round(m["lane_departure_rate"] * k)
        totals["no_progress"] += round((m.get("no_progress_rate") or 0.0) * k)
        # without the expert's numbers (it crashed on every seed): collisions and departures
        # (each ends its episode, so no episode counts twice)
        failed = m.get("failure_rate")
        if failed is None:
            failed = m["collision_rate"] + m["lane_departure_rate"]
        totals["failed"] += round(failed * k)
        jerk += m["mean_abs_jerk"] * k
    totals["mean_abs_jerk"] = jerk / totals["episodes"] if totals["episodes"] else None
    return totals


def rank_key(summary: dict[str, Any]) -> tuple:
    jerk = summary["mean_abs_jerk"]
    return (summary["collisions"], summary["failed"], float("inf") if jerk is None else jerk)


def select_model(
    models: list[str],
    scenarios: list[str],
    episodes: int,
    seed: int,
    duration: float,
    out: Path,
    say=print,
) -> int:
    """Drive every candidate, write OUT/selection.json and OUT/model; the chosen index."""
    if len(set(models)) != len(models):
        raise RecipeError("select: a candidate model is listed twice")
    if len(set(scenarios)) != len(scenarios):
        raise RecipeError("select: a scenario is listed twice")
    if episodes < 1:
        raise RecipeError("select: --episodes must be >= 1")
    (out / "candidates").mkdir(parents=True, exist_ok=True)
    seeds = list(range(seed, seed + episodes))
    rows = []
    for i, model in enumerate(models):
        runs = {}
        for scenario in scenarios:
            path = _run_file(out, i, scenario)
            if not _finished(path, model, seeds, duration):
                say(f"select: candidate {i + 1}/{len(models)} ({model}), {scenario}")
                _drive(model, scenario, episodes, seed, duration, path)
            runs[scenario] = json.loads(path.read_text())
        summary = candidate_summary(runs)
        rows.append(
            {
                "model": model,
                "runs": {s: str(_run_file(out, i, s).relative_to(out)) for s in scenarios},
                "by_scenario": {s: candidate_summary({s: runs[s]}) for s in scenarios},
                **summary,
            }
        )
        say(
            f"select: {model}: {summary['collisions']} collisions, {summary['failed']} failed "
            f"of {summary['episodes']}"
        )
    chosen = min(range(len(rows)), key=lambda i: rank_key(rows[i]))
    target = out / "model"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(models[chosen], target)
    doc = {
        "rule": RULE,
        "scenarios": scenarios,
        "seeds": [seeds[0], seeds[-1]],
        "duration_s": duration,
        "candidates": rows,
        "chosen": chosen,
    }
    (out / SELECTION).write_text(json.dumps(doc, indent=1) + "\n")
    say(f"select: chose {models[chosen]}")
    return chosen
