"""Tokens of the shipped tiny model on the CPU against another device, per strategy and dtype.

    python scripts/device_tokens.py --device cuda --out tokens.json [--model DIR]

For every decoding strategy, in float32 and float64, the CPU's eager plan is compared with
the device's eager plan and its `model.cuda_graphs` plan (replayed CUDA graphs). With
`--device cpu` (scripts/gpu_bench.sh --dry) the second side is the CPU's static-shape path
without capture. Full diffusion runs at most 8 denoising steps (its CPU side is the slow
part). Writes {"device", "model", "results": {dtype: {strategy: {...}}}} and exits
1 if any pair differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from blockplan.backends.graphs import DirectRunner, GraphBackend
from blockplan.config import MODEL_STRATEGIES, default_params_path, load_config
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default=str(ROOT / "models" / "blockplan-tiny"))
    parser.add_argument("--observations", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict[str, dict]] = {}
    ok = True
    for dtype in ("float32", "float64"):
        base = load_config(default_params_path())
        # full diffusion capped at 8 denoising steps: its CPU side dominates the time limit
        config = base.with_params(  # eager torch: the reference every device path matches
            {
                "model.backend": "torch",
                "model.dtype": dtype,
                "model.num_threads": 1,
                "decoding.max_denoise_steps": 8,
            }
        )
        cpu = Planner.from_folder(args.model, config)
        on = {"model.device": args.device}
        if args.device == "cpu":
            other = {"eager": cpu}
            static = GraphBackend(cpu.model, DirectRunner())
            other["graphs"] = Planner(cpu.model, cpu.tokenizer, cpu.config, cpu.schema, static)
        else:
            other = {
                "eager": Planner.from_folder(args.model, config.with_params(on)),
                "graphs": Planner.from_folder(
                    args.model, config.with_params({**on, "model.cuda_graphs": True})
                ),
            }
        per: dict[str, dict] = {}
        for strategy in MODEL_STRATEGIES:
            entry: dict[str, object] = {}
            t0 = time.perf_counter()
            for i in range(args.observations):
                obs = synthetic_observation(config, i)
                want = cpu.decode(obs, strategy).result.tokens
                for name, planner in other.items():
                    same = np.array_equal(planner.decode(obs, strategy).result.tokens, want)
                    entry[name] = bool(entry.get(name, True) and same)
            entry["seconds"] = round(time.perf_counter() - t0, 2)
            ok = ok and all(v for k, v in entry.items() if k != "seconds")
            per[strategy] = entry
            print(dtype, strategy, entry, flush=True)
        graphs = other["graphs"].runner
        per["_graphs"] = graphs.report() if hasattr(graphs, "report") else None
        results[dtype] = per
    report = {"device": args.device, "model": args.model, "identical": ok, "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
