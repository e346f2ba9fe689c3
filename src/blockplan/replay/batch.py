"""Several bags in one `blockplan replay`: one output folder per bag and a summary over all.

One bag is one episode; a model judged on one bag is judged on one episode (the 15 s bag
and the demo of docs/BENCHMARKS.md each are). `blockplan replay A.mcap B.mcap ... --out DIR`
replays each bag into DIR/<name> exactly as a replay of that bag alone would (the planner
is loaded once and reset between bags), then writes DIR/summary.json: every bag's headline
numbers and their aggregate (mean and median of the per-bag ADE@5s, the fallback share over
all ticks, the worst bag).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from blockplan.replay.report import write_atomic
from blockplan.replay.topics import ReplayInputError

SUMMARY_FILE = "summary.json"
HEADLINE = ("ticks", "plans", "fallbacks", "evaluated_plans", "ade_3s", "ade_5s")


def bag_name(bag: str | Path) -> str:
    """The output folder name of a bag: its file name without the storage suffix (a rosbag2
    folder keeps its name)."""
    path = Path(bag)
    return path.stem if path.suffix in (".mcap", ".db3") else path.name


def output_folders(bags: list[str], out: Path) -> list[Path]:
    """DIR/<name> per bag; two bags of the same name are refused before anything runs."""
    names = [bag_name(b) for b in bags]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise ReplayInputError(
            f"bags with the same name {', '.join(clashes)} would share an output folder under "
            f"{out}: rename or replay them separately"
        )
    return [out / n for n in names]


def bag_row(bag: str, out: Path, metrics: dict[str, Any] | None, error: str | None) -> dict:
    """One bag's line of the summary: its headline metrics, or the error that stopped it."""
    row: dict[str, Any] = {"bag": str(bag), "out": str(out)}
    if error is not None:
        return row | {"error": error}
    assert metrics is not None
    row |= {k: metrics[k] for k in HEADLINE if k in metrics}
    ticks = metrics.get("ticks") or 0
    row["fallback_fraction"] = round(metrics["fallbacks"] / ticks, 4) if ticks else None
    return row


def summarize(rows: list[dict]) -> dict[str, Any]:
    """The aggregate over the bags that finished: per-bag ADE@5s mean, median and worst, and
    the fallback share over all their ticks."""
    done = [r for r in rows if "error" not in r]
    scored = [r for r in done if r.get("ade_5s") is not None]
    ticks = sum(r["ticks"] for r in done)
    out: dict[str, Any] = {
        "bags": len(rows),
        "failed": len(rows) - len(done),
        "ticks": ticks,
        "plans": sum(r["plans"] for r in done),
        "fallbacks": sum(r["fallbacks"] for r in done),
        "fallback_fraction": round(sum(r["fallbacks"] for r in done) / ticks, 4) if ticks else None,
        "scored_bags": len(scored),
    }
    if scored:
        ade = [float(r["ade_5s"]) for r in scored]
        worst = max(scored, key=lambda r: float(r["ade_5s"]))
        out |= {
            "ade_5s_mean": round(statistics.fmean(ade), 3),
            "ade_5s_median": round(statistics.median(ade), 3),
            "ade_3s_mean": round(statistics.fmean(float(r["ade_3s"]) for r in scored), 3),
            "worst_bag": worst["bag"],
            "worst_ade_5s": worst["ade_5s"],
        }
    return out


def write_summary(out: Path, rows: list[dict], extra: dict[str, Any]) -> Path:
    path = out / SUMMARY_FILE
    doc = {**extra, "aggregate": summarize(rows), "per_bag": rows}
    write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode())
    return path


def _metres(value: float | None) -> str:
    return "n/a" if value is None else f"{float(value):.2f}"


def summary_lines(rows: list[dict], path: Path) -> list[str]:
    """The table `blockplan replay` prints after several bags."""
    agg = summarize(rows)
    lines = ["", f"{'bag':<28} {'ticks':>6} {'fallbacks':>10} {'ADE@3s':>8} {'ADE@5s':>8}"]
    for r in rows:
        name = Path(r["bag"]).name[:28]
        if "error" in r:
            lines.append(f"{name:<28} failed: {r['error']}")
            continue
        ade3, ade5 = (_metres(r.get(k)) for k in ("ade_3s", "ade_5s"))
        lines.append(f"{name:<28} {r['ticks']:>6} {r['fallbacks']:>10} {ade3:>8} {ade5:>8}")
    share = agg["fallback_fraction"]
    line = (
        f"{agg['bags']} bags ({agg['failed']} failed): {agg['ticks']} ticks, "
        f"{agg['fallbacks']} fallbacks ({'n/a' if share is None else f'{share:.1%}'})"
    )
    if agg["scored_bags"]:
        line += (
            f"; ADE@5s per bag mean {agg['ade_5s_mean']:.2f} m, median "
            f"{agg['ade_5s_median']:.2f} m, worst {agg['worst_ade_5s']:.2f} m "
            f"({Path(agg['worst_bag']).name})"
        )
    return [*lines, line, f"summary     {path}"]
