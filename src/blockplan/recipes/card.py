"""MODEL_CARD.md, written from the recipe and the measured evaluations.

Every number in the card is read from an evaluation stage's output (`blockplan eval`,
`closed-loop` or `replay` metrics); the text around them comes from the recipe's `card`
section. The card names the recipe file, the scale and the commit it was made at.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from blockplan.recipes.checks import check_target, outcome_line, parse_target
from blockplan.recipes.runner import StageResult
from blockplan.recipes.select import SELECTION
from blockplan.recipes.spec import REFERENCE, Recipe
from blockplan.recipes.stages import EVALUATIONS, KINDS, METRICS

# The blind bars of the open-loop table: what a planner must beat without reading cameras.
BASELINES = (
    ("constant_velocity", "constant velocity"),
    ("ego_mlp", "ego-status MLP"),
    ("ego_mlp_lane_pose", "ego-status MLP + lane pose"),
    ("ego_mlp_lead", "ego-status MLP + car ahead"),
    ("ego_mlp_beside", "ego-status MLP + lanes beside"),
    ("ego_mlp_route", "ego-status MLP + route ahead"),
)


# Said once under the evaluations, for every closed-loop and selection table.
FAILED_NOTE = (
    "Failed: a collision, a lane departure or no progress (the episode ended short of half the "
    "expert's path on that seed); – where the run has no expert."
)


def commit_of(path: Path) -> str:
    """The commit the recipe file is at, "+ local changes" when the checkout differs."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(path.parent), *args], capture_output=True, text=True, check=False
        )

    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" + local changes" if dirty else "")


def shown_path(path: Path) -> str:
    """A path as the card shows it: relative to the working directory, else its name (the
    card never names a folder of the machine that made it)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path.name


def write_card(recipe: Recipe, results: list[StageResult], out: Path, scale: str) -> str:
    card = recipe.card
    lines = [f"# {card.get('title', recipe.name)}", ""]
    if card.get("summary") or recipe.description:
        lines += [str(card.get("summary") or recipe.description).strip(), ""]
    command = f"blockplan recipe run {shown_path(recipe.path)} --scale {scale} --out OUT"
    lines += [
        f"Made by `{command}` at commit {commit_of(recipe.path)}; this card is that run's "
        "output (every number below is read from an evaluation stage's metrics).",
        "",
    ]
    if scale != "full":
        lines += [
            f"**A {scale}-scale run**: every stage shrunk so the pipeline runs in minutes; "
            "its numbers show the pipeline works, not how well the model drives.",
            "",
        ]
    lines += ["## Evaluation", ""]
    evaluated = [r for r in results if r.stage.run in (*EVALUATIONS, "select")]
    if not evaluated:
        lines += ["The recipe has no evaluation stage.", ""]
    names = {str(r.output): r.stage.name for r in results}  # a stage's output -> its name
    for result in evaluated:
        lines += _evaluation(result, scale, names)
    driven = any(r.stage.run in ("closed-loop", "select") for r in evaluated)
    if driven and recipe.embodiment == "vehicle":
        lines += [FAILED_NOTE, ""]
    if card.get("targets"):
        lines += ["## Targets", ""] + _targets(card["targets"], results, scale) + [""]
    lines += [
        "## How it was made",
        "",
        "| stage | runs | arguments | minutes |",
        "|---|---|---|---|",
    ]
    for r in results:
        parser = KINDS[r.stage.run].parser()
        positional = {a.dest for a in parser._actions if not a.option_strings}
        args = " ".join(_short(a, positional) for a in r.stage.args_at(scale).items())
        lines.append(f"| {r.stage.name} | {r.stage.run} | {args} | {r.seconds / 60:.1f} |")
    lines.append("")
    if card.get("limits"):
        lines += ["## Known limits", ""] + [f"- {t}" for t in card["limits"]] + [""]
    return "\n".join(lines)


def _targets(raw: list[Any], results: list[StageResult], scale: str) -> list[str]:
    """Each target with its verdict on this run's metrics (recipes/checks.py)."""
    metrics = {r.stage.name: _metrics_files(r) for r in results if r.stage.run in EVALUATIONS}
    outcomes = [check_target(parse_target(t, "card.targets"), metrics) for t in raw]
    lines = [outcome_line(o) for o in outcomes]
    if scale != "full" and any(o.target.check for o in outcomes):
        lines += ["", f"(Checked on the {scale}-scale run's numbers.)"]
    return lines


def _metrics_files(result: StageResult) -> list[tuple[str, Path]]:
    """(label, metrics file) of every document an evaluation stage wrote: one, or one per bag
    of a replay."""
    if result.stage.run == "replay":
        return [
            (f"{result.stage.name}/{p.parent.name}", p)
            for p in sorted(result.output.rglob(METRICS))
        ]
    return [(result.stage.name, result.output)] if result.output.is_file() else []


def _shown(value: Any) -> str:
    """A recipe value as the card shows it: `{stage}` reads "stage STAGE's output"."""
    return REFERENCE.sub(lambda m: f"stage {m.group(1)}", str(value))


def _scalar(value: Any) -> str:
    """A recipe value as YAML writes it (true, null, 4)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _short(item: tuple[str, Any], positional: set[str]) -> str:
    key, value = item
    if value is True:
        return f"`--{key}`"
    if isinstance(value, dict):  # `set: {name: value}`: one `--set name=value` each
        return " ".join(f"`--{key} {k}={_scalar(v)}`" for k, v in value.items())
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"`{text}`" if key in positional else f"`--{key} {text}`"


def _evaluation(result: StageResult, scale: str, names: dict[str, str]) -> list[str]:
    name, run = result.stage.name, result.stage.run
    args = result.stage.args_at(scale)
    about = f" — {result.stage.about}" if result.stage.about else ""
    model = _shown(args.get("model", ""))
    head = [f"### {name}{about}", ""]
    if run == "eval":
        return head + _open_loop(_read(result.output), model, str(args.get("split", "test")))
    if run == "closed-loop":
        doc = _read(result.output)
        if doc.get("run", {}).get("embodiment") == "robot":
            return head + _robot(doc, args)
        return head + _closed_loop(doc)
    if run == "replay":
        return head + _replay(result.output)
    if run == "select":
        return head + _selection(result.output.parent / SELECTION, names)
    return head


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _f(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _open_loop(doc: dict[str, Any], model: str, split: str = "test") -> list[str]:
    n = doc.get("model", {}).get("num_samples")
    lines = [
        f"Open loop on {n} samples of the {split} split (`blockplan eval`"
        f"{', ' + model if model else ''}).",
        "",
        "| planner | ADE@5s (m) | ADE@3s (m) | parse failures |",
        "|---|---|---|---|",
    ]
    rows = [("model", "model, N = 1"), ("rollouts_n4", "model, N = 4 rollouts")] + list(BASELINES)
    for key, label in rows:
        m = doc.get(key)
        if m:
            fails = m.get("parse_failures", "–")
            lines.append(f"| {label} | {_f(m['ade_5s'])} | {_f(m['ade_3s'])} | {fails} |")
    lines += _blind_margin(doc)
    per = doc.get("rollouts_n4", {}).get("ade_5s_by_scenario") or {}
    if per:
        scen = sorted(per)
        lines += ["", "ADE@5s per scenario (m):", "", "| planner | " + " | ".join(scen) + " |"]
        lines.append("|---|" + "---|" * len(scen))
        for key, label in [("rollouts_n4", "model, N = 4")] + list(BASELINES):
            m = doc.get(key, {}).get("ade_5s_by_scenario")
            if m:
                lines.append(f"| {label} | " + " | ".join(_f(m.get(s)) for s in scen) + " |")
    return lines + [""]


def _blind_margin(doc: dict[str, Any]) -> list[str]:
    """The ego-status MLP's spread over its fit seeds (`eval --mlp-seeds`), and how far the
    model's N = 4 rollouts are below the best blind bar (`blind_best`: the smallest ADE@5s of
    every MLP row and seed; computed here for metrics written before eval reported it),
    overall and per scenario."""
    seeds = doc.get("ego_mlp", {}).get("ade_5s_over_seeds") or []
    model = doc.get("rollouts_n4", {})
    best = doc.get("blind_best")
    if best is None:
        bars = [doc[k]["ade_5s"] for k, _ in BASELINES if k.startswith("ego_mlp") and k in doc]
        best = {"ade_5s": min(bars + seeds)} if bars else None
    lines = [""]
    if len(seeds) > 1:
        lines.append(
            f"The ego-status MLP over {len(seeds)} fit seeds: ADE@5s {_f(min(seeds))}–"
            f"{_f(max(seeds))} m."
        )
    if model.get("ade_5s") is not None and best:
        lines.append(
            f"Model, N = 4: {_below(model['ade_5s'], best['ade_5s'])} the best blind bar "
            f"({_f(best['ade_5s'])} m, the smallest ADE@5s of the MLP rows and seeds)."
        )
        per, bars = model.get("ade_5s_by_scenario") or {}, best.get("ade_5s_by_scenario") or {}
        common = [s for s in sorted(per) if s in bars]
        if common:
            lines.append(
                "Per scenario: "
                + ", ".join(
                    f"{s} {_below(per[s], bars[s])} ({_f(per[s])} vs {_f(bars[s])} m)"
                    for s in common
                )
                + "."
            )
    return lines if len(lines) > 1 else []


def _below(value: float, bar: float) -> str:
    """How far `value` is below `bar`, in percent of the bar."""
    below = (bar - value) / bar * 100
    return f"{below:.1f} % below" if below >= 0 else f"{-below:.1f} % above"


def _closed_loop(doc: dict[str, Any]) -> list[str]:
    run = doc.get("run", {})
    seeds = run.get("seeds") or []
    span = (
        f"seed {seeds[0]}"
        if len(seeds) == 1
        else f"seeds {seeds[0]}–{seeds[-1]}"
        if seeds
        else "no seeds"
    )
    lines = [
        f"Closed loop, {run.get('scenario')}, {span}, {run.get('duration_s')} s each, "
        f"decoding {run.get('decoding')}.",
        "",
        "| policy | episodes | collisions | lane departures | no progress | failed | progress (m) "
        "| mean abs jerk (m/s³) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy, m in doc.items():
        if isinstance(m, dict) and "collision_rate" in m and "episodes" in m:
            k = m["episodes"]
            lines.append(
                f"| {policy} | {k} | {_count(m['collision_rate'], k)} | "
                f"{_count(m['lane_departure_rate'], k)} | "
                f"{_count(m.get('no_progress_rate'), k)} | {_count(m.get('failure_rate'), k)} | "
                f"{_f(m['progress_m'], 1)} | {_f(m['mean_abs_jerk'])} |"
            )
    return lines + [""]


def _selection(path: Path, names: dict[str, str]) -> list[str]:
    """The candidates' validation closed loop, summed over the scenarios, and the choice."""
    doc = _read(path)
    first, last = doc["seeds"]
    lines = [
        f"Each candidate drove {', '.join(doc['scenarios'])}, seeds {first}–{last} "
        f"(validation), {doc['duration_s']} s each; chosen by {doc['rule']}.",
        "",
        "| candidate | episodes | collisions | lane departures | no progress | failed "
        "| mean abs jerk (m/s³) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(doc["candidates"]):
        name = names.get(c["model"], Path(c["model"]).name)
        name = f"**{name}** (chosen)" if i == doc["chosen"] else name
        lines.append(
            f"| {name} | {c['episodes']} | {c['collisions']} | {c['departures']} | "
            f"{c['no_progress']} | {c['failed']} | {_f(c['mean_abs_jerk'])} |"
        )
    return lines + [""]


def _count(rate: float | None, episodes: int) -> str:
    """A rate over `episodes` as the number of episodes; – when unknown."""
    return "–" if rate is None else str(round(rate * episodes))


def _robot(doc: dict[str, Any], args: dict[str, Any]) -> list[str]:
    lines = [
        f"Meta-World `{args.get('task', 'reach')}`, unseen seeds from {args.get('seed')}, "
        f"at most {args.get('max-steps')} control steps.",
        "",
        "| policy | episodes | success | mean steps |",
        "|---|---|---|---|",
    ]
    for policy, m in doc.items():
        if isinstance(m, dict) and "success_rate" in m:
            lines.append(
                f"| {policy} | {m.get('episodes')} | {m['success_rate']:.0%} | "
                f"{_f(m.get('mean_steps'), 1)} |"
            )
    return lines + [""]


def _replay(folder: Path) -> list[str]:
    lines = [
        "| bag | timing | ticks | plans | fallbacks | ADE@5s (m) | plan latency p50 (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted(folder.rglob(METRICS)):
        m = _read(path)
        bag = path.parent.name if path.parent != folder else Path(str(m.get("bag", "bag"))).name
        p50 = (m.get("latency_ms") or {}).get("p50")
        lines.append(
            f"| {bag} | {m.get('timing', '–')} | {m.get('ticks', '–')} | {m.get('plans', '–')} "
            f"| {m.get('fallbacks', '–')} | {_f(m.get('ade_5s'))} | {_f(p50, 1)} |"
        )
    return lines + [""]
