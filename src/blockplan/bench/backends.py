"""Backends against each other (`blockplan bench --backend torch,onnxruntime`).

Same model, same inputs; within a round every strategy runs on every backend back to back
(backend order alternating by round), so load drift on a shared machine hits them alike.
Reports each backend's per-strategy summary, its p50 latency relative to the first backend,
the fraction of plans whose tokens equal the first backend's, and the fraction of tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blockplan.bench.decoding import (
    Progress,
    Run,
    model_summary,
    strategy_runner,
    summarize,
)
from blockplan.planner.planner import Planner


def run_backend_bench(
    planners: dict[str, Planner],
    strategies: Sequence[str],
    iters: int,
    warmup: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`planners`: backend name → a Planner on that backend (the first is the reference)."""
    say = progress or (lambda _msg: None)
    names = list(planners)
    reference = planners[names[0]]
    runners = {(b, s): strategy_runner(planners[b], s) for b in names for s in strategies}
    # the embodiment's own synthetic inputs (a robot model gets joints and an instruction)
    inputs = [reference.format.synthetic(reference.config, seed + i) for i in range(warmup + iters)]
    runs: dict[tuple[str, str], list[Run]] = {key: [] for key in runners}
    for i, obs in enumerate(inputs):
        say(f"bench backends: round {i + 1}/{len(inputs)}" + (" (warm-up)" if i < warmup else ""))
        order = names if i % 2 == 0 else names[::-1]
        for strategy in strategies:
            for backend in order:
                run = runners[(backend, strategy)](obs)
                if i >= warmup:
                    runs[(backend, strategy)].append(run)
    A = len(reference.scaffold)
    report: dict[str, Any] = {
        "model": model_summary(reference, iters, warmup),
        "reference_backend": names[0],
        "backends": {},
        "latency_ratio_vs_reference": {},
        "identical_tokens_fraction": {},
        "token_agreement_fraction": {},
    }
    for backend in names:
        per: dict[str, Any] = {}
        for strategy in strategies:
            tokens = A
            if strategy == "rollouts":  # the N - 1 more trajectories (driving only)
                trajectory = reference.scaffold.section("trajectory")
                tokens += (reference.cache.max_batch - 1) * (trajectory.end - trajectory.start)
            per[strategy] = summarize(runs[(backend, strategy)], float(tokens))
        report["backends"][backend] = per
    for backend in names[1:]:
        ratios, same, agree = {}, {}, {}
        for strategy in strategies:
            ours = report["backends"][backend][strategy]["latency_ms"]["p50"]
            ref = report["backends"][names[0]][strategy]["latency_ms"]["p50"]
            ratios[strategy] = round(ours / ref, 3)
            pairs = zip(runs[(names[0], strategy)], runs[(backend, strategy)], strict=True)
            pairs = list(pairs)
            same[strategy] = float(np.mean([_same(a, b) for a, b in pairs]))
            agree[strategy] = float(np.mean([_agreement(a, b) for a, b in pairs]))
        report["latency_ratio_vs_reference"][backend] = ratios
        report["identical_tokens_fraction"][backend] = same
        report["token_agreement_fraction"][backend] = agree
    return report


def _same(a: Run, b: Run) -> bool:
    return a.tokens is not None and b.tokens is not None and np.array_equal(a.tokens, b.tokens)


def _agreement(a: Run, b: Run) -> float:
    """The fraction of answer tokens equal at the same position (0 for a failed plan)."""
    if a.tokens is None or b.tokens is None or np.shape(a.tokens) != np.shape(b.tokens):
        return 0.0
    return float(np.mean(np.asarray(a.tokens) == np.asarray(b.tokens)))
