"""The markdown section scripts/gpu_bench.sh writes from its JSON files (OUT_DIR in argv[1]).

Every number comes from the files of this run; the GPU targets are checked against
them and marked met / missed, nothing is assumed.

    python scripts/gpu_bench_report.py OUT_DIR [--dry]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAPER = {  # one H100, Qwen2.5-VL-3B, trained weights (docs/BENCHMARKS.md)
    "ar": "7855 ms, 51.6 tok/s",
    "scaffold_spec": "1919 ms, 210.4 tok/s",
}


def load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def tail(path: Path) -> str:
    if not path.is_file():
        return "(missing)"
    lines = path.read_text().strip().splitlines()
    return lines[-1] if lines else "(empty)"


def main(out: Path, dry: bool) -> str:
    env = (out / "env.txt").read_text().strip() if (out / "env.txt").is_file() else "?"
    lines = ["### Torch backend on a GPU, eager and CUDA graphs (scripts/gpu_bench.sh)", ""]
    if dry:
        lines += [
            "**Dry run on a CPU** (`--dry`): the script end to end, the graph path "
            "without capture; no GPU number.",
            "",
        ]
    lines += [f"`{env}`", "", "Device parity tests: " + tail(out / "pytest.txt"), ""]
    tokens = load(out / "tokens.json")
    if tokens:
        lines += [
            f"Shipped model, CPU eager against {tokens['device']} (eager / graphs), "
            f"identical tokens per strategy:",
            "",
            "| dtype | "
            + " | ".join(k for k in tokens["results"]["float32"] if k[0] != "_")
            + " |",
            "|---" * (1 + sum(k[0] != "_" for k in tokens["results"]["float32"])) + "|",
        ]
        for dtype, per in tokens["results"].items():
            cells = [f"{v['eager']} / {v['graphs']}" for k, v in per.items() if k[0] != "_"]
            lines.append(f"| {dtype} | " + " | ".join(cells) + " |")
        lines.append("")
    tiny_cpu, device = load(out / "bench_tiny_cpu.json"), tokens["device"] if tokens else None
    tiny_dev = load(out / f"bench_tiny_{device}.json") if device and device != "cpu" else None
    if tiny_cpu:
        cols = ["cpu"] + ([device] if tiny_dev else [])
        lines += [
            f"Random-init tiny ({tiny_cpu['model']['params']} parameters, eager), p50 ms:",
            "",
            "| strategy | " + " | ".join(cols) + " |",
            "|---" * (len(cols) + 1) + "|",
        ]
        for name, s in tiny_cpu["strategies"].items():
            cells = [str(s["latency_ms"]["p50"])]
            if tiny_dev:
                cells.append(str(tiny_dev["strategies"][name]["latency_ms"]["p50"]))
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        lines.append("")
    big = load(out / "bench_big.json")
    if big is None:
        lines += ["3B bench: no result (see gpu_bench.log)", ""]
        return "\n".join(lines)
    m, g = big["model"], big["graphs"]
    lines += [
        f"{m['source']}, {m['dtype']} on {m['device']}, prompt {m['prompt_tokens']} tokens, "
        f"answer {m['answer_tokens']} ({m['editable_tokens']} editable), {m['iters']} timed "
        f"rounds after {m['warmup']} warm-up; graphs captured: {g['graphs_captured']}, capture "
        f"failures: {len(g['capture_failures'])}; forwards in the timed rounds: "
        f"{json.dumps(g['forwards_timed_rounds'])}",
        "",
    ]
    if big.get("interrupted"):
        lines += [
            f"**Cut short by its time limit** after {big.get('timed_rounds', 0)} of "
            f"{m['iters']} timed rounds: the plan table holds the rounds that finished (none: "
            "no plan table); the forwards by width ran first and are whole.",
            "",
        ]
    lines += [
        "| strategy | forwards / plan | eager p50 ms | graphs p50 ms | graphs / eager | eager "
        "tok/s | graphs tok/s | identical | paper (H100, trained) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in big["variants"]["eager"].items():
        gr = big["variants"]["graphs"][name]
        lines.append(
            f"| `{name}` | {e['forwards_per_plan']} | {e['latency_ms']['p50']} | "
            f"{gr['latency_ms']['p50']} | {big['graphs_latency_ratio_vs_eager'][name]} | "
            f"{e['tokens_per_s']} | {gr['tokens_per_s']} | "
            f"{big['graphs_identical_tokens_fraction'][name]} | {PAPER.get(name, '')} |"
        )
    fw, floor = big["forward_ms_by_width"], big["bandwidth_floor"]
    widths = list(fw["eager"])
    lines += [
        "",
        f"One forward (B = 1, after {fw['past_slots']} prompt slots), ms by window width (median):",
        "",
        "| | " + " | ".join(widths) + " |",
        "|---" * (len(widths) + 1) + "|",
    ]
    for variant in ("eager", "graphs"):
        lines.append(f"| {variant} | " + " | ".join(str(fw[variant][w]) for w in widths) + " |")
    if "floor_ms" in floor:
        lines.append(
            "| bandwidth floor | " + " | ".join(str(floor["floor_ms"][w]) for w in widths) + " |"
        )
        for variant in ("eager", "graphs"):
            ratios = floor["ratio_to_floor"][variant]
            lines.append(
                f"| {variant} / floor | " + " | ".join(str(ratios[w]) for w in widths) + " |"
            )
        lines += [
            "",
            f"Floor: {floor['decoder_weight_bytes'] / 1e9:.4g} GB of decoder weights "
            f"+ {floor['kv_bytes_per_slot']} B per attended K/V slot, read once at "
            f"{floor['bandwidth_gb_per_s']} GB/s ({floor['bandwidth_source']}).",
        ]
    lines.append("")
    stages = big.get("stage_ms_p50", {})
    for variant in ("eager", "graphs"):
        lines.append(f"Stages p50 ({variant}, ms): " + json.dumps(stages.get(variant, {})))
    lines.append("")
    roll = big.get("rollouts_latency_ratio_vs_n1")
    proj = big.get("scaffold_spec_projection")
    if proj:
        lines += [
            f"Scaffold spec at the paper's {proj['tokens_per_step']} tokens per step "
            f"(an estimate: prefill + {proj['steps']} draft-and-verify pairs at width "
            f"{proj['forward_width']}): eager {proj['eager']['plan_ms']} ms, graphs "
            f"{proj['graphs']['plan_ms']} ms.",
            "",
        ]
    targets = []
    if "floor_ms" in floor:
        r = floor["ratio_to_floor"]["graphs"]["1"]
        targets.append(("1-token AR forward with graphs <= 1.5x the bandwidth floor", r, r <= 1.5))
    if proj:
        ms = proj["graphs"]["plan_ms"]
        targets.append(("scaffold_spec plan <= 300 ms (projected at 4.9 tok/step)", ms, ms <= 300))
    if roll:
        r = roll["graphs"]
        targets.append(("N = 4 rollouts <= 1.3x N = 1 (graphs)", r, r <= 1.3))
    if targets:
        lines += ["| target | measured | met |", "|---|---|---|"]
        for t, v, ok in targets:  # a dry run's CPU numbers are no test of GPU targets
            lines.append(f"| {t} | {v} | {'n/a (dry run)' if dry else 'yes' if ok else 'no'} |")
        lines.append("")
    lines += [
        "```bash",
        "scripts/gpu_bench.sh" + (" --dry" if dry else "") + " gpu_bench",
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    text = main(out, "--dry" in sys.argv[2:])
    (out / "BENCHMARKS_gpu_torch.md").write_text(text)
    print(text)
