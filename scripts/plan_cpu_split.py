"""CPU time per plan, split into ONNX Runtime's decoder calls and everything else (issue #23).

    PYTHONPATH=<tree>/src python scripts/plan_cpu_split.py --model models/blockplan-tiny \\
        --strategies scaffold_spec,rollouts

Every plan of synthetic independent inputs (no draft from a previous answer) is timed with
`time.thread_time`, and so is every call of the dynamic decoder graph inside it; "rest" is
the plan's time outside those calls: the engine's Python, the vision tower, prompt and
parse. Reports the 25th percentile over `--rounds` x `--inputs` plans (the machine is shared:
a low percentile of thread time is the least disturbed). Runs against whatever `blockplan`
the PYTHONPATH names: alternate two trees for a before / after.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from blockplan.config import default_params_path, load_config
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_input


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/blockplan-tiny")
    parser.add_argument("--strategies", default="scaffold_spec,rollouts")
    parser.add_argument("--inputs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(default_params_path()).with_params({"model.backend": "onnxruntime"})
    planner = Planner.from_folder(Path(args.model), config)
    session = planner.runner.executor.dynamic_session
    run = session.run
    spent = {"ort": 0.0, "calls": 0}

    def timed_run(outputs, feeds):
        t0 = time.thread_time()
        try:
            return run(outputs, feeds)
        finally:
            spent["ort"] += time.thread_time() - t0
            spent["calls"] += 1

    session.run = timed_run
    inputs = [synthetic_input(planner.config, s, planner.schema) for s in range(args.inputs)]
    print("| strategy | CPU ms / plan (p25) | in ONNX Runtime | the rest | graph calls / plan |")
    print("|---|---|---|---|---|")
    for strategy in args.strategies.split(","):
        for obs in inputs[:2]:  # warm-up
            planner.previous_answer = None
            planner.decode(obs, strategy)
        total, ort, calls = [], [], []
        for _ in range(args.rounds):
            for obs in inputs:
                spent.update(ort=0.0, calls=0)
                planner.previous_answer = None
                t0 = time.thread_time()
                planner.decode(obs, strategy)
                total.append(time.thread_time() - t0)
                ort.append(spent["ort"])
                calls.append(spent["calls"])
        total_ms, ort_ms = np.asarray(total) * 1e3, np.asarray(ort) * 1e3
        q = lambda a: float(np.percentile(a, 25))  # noqa: E731
        print(
            f"| {strategy} | {q(total_ms):.1f} | {q(ort_ms):.1f} | {q(total_ms - ort_ms):.1f} "
            f"| {np.mean(calls):.1f} |"
        )


if __name__ == "__main__":
    main()
