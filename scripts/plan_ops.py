"""ATen ops and CPU time per plan, per strategy (issue #23's load-independent measure).

    PYTHONPATH=<tree>/src python scripts/plan_ops.py --model models/blockplan-tiny \\
        --strategies ar,scaffold_spec,rollouts

Ops: every op reaching the dispatcher during one plan (a `TorchDispatchMode`; composite ops
decomposed). CPU time: `time.thread_time` per plan, min and median over 8 plans (4 inputs,
twice), so time the shared machine gives other processes is not counted. Runs against
whatever `blockplan` the PYTHONPATH names: point it at two trees for a before / after.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from blockplan.config import default_params_path, load_config
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_input


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/blockplan-tiny")
    parser.add_argument("--strategies", default="ar,scaffold_spec,rollouts")
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--top", type=int, default=0, help="also print the N commonest ops")
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = {  # torch: the ATen ops are what it counts
        "model.backend": "torch",
        "model.num_threads": 1,
        "rollouts.num_rollouts": args.rollouts,
    }
    config = load_config(default_params_path()).with_params(overrides)
    planner = Planner.from_folder(Path(args.model), config)
    inputs = [synthetic_input(planner.config, i, planner.schema) for i in range(4)]
    for strategy in args.strategies.split(","):
        planner.decode(inputs[0], strategy)  # warm-up
        with OpCounter() as counter:
            planner.decode(inputs[0], strategy)
        times = []
        for obs in inputs * 2:
            t0 = time.thread_time()
            planner.decode(obs, strategy)
            times.append((time.thread_time() - t0) * 1e3)
        times.sort()
        total = sum(counter.ops.values())
        print(f"{strategy}: {total} ops, CPU ms min {times[0]:.1f} median {times[4]:.1f}")
        if args.top:
            print(counter.ops.most_common(args.top))


if __name__ == "__main__":
    main()
