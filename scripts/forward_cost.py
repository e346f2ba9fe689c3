"""One decoder forward on the torch fast path and on onnxruntime's dynamic graph, interleaved:
thread time per call (min of `--rounds` x `--calls`), per (new tokens, past) shape.

    python scripts/forward_cost.py [--model models/blockplan-tiny]

Each call is what the engine runs for one window: the runner's forward with the cache holding
`past` committed slots, the new tokens' K/V written pending, the logits of the last row.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from blockplan.config import default_params_path, load_config
from blockplan.model.masks import causal_mask
from blockplan.planner.planner import Planner

SHAPES = ((1, 250), (5, 250), (12, 250), (30, 250), (85, 136), (136, 0))  # (S, past)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/blockplan-tiny")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_config(default_params_path())
    reference = Planner.from_folder(
        Path(args.model), config.with_params({"model.backend": "torch"})
    )
    ort_config = config.with_params({"model.backend": "onnxruntime"})
    planners = {
        "torch": reference,
        "onnxruntime": Planner(reference.model, reference.tokenizer, ort_config, reference.schema),
    }
    vocab = reference.model.config.decoder.vocab_size
    print("| new tokens S | past | torch (µs) | onnxruntime (µs) | ratio |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for S, past in SHAPES:
            if past + S > reference.cache.max_len:
                continue
            window = {
                "input_ids": torch.randint(0, vocab, (1, S)),
                "positions": torch.arange(past, past + S),
                "mask": causal_mask(S, past),
                "logit_rows": torch.tensor([S - 1]),
            }
            best: dict[str, float] = {}
            for _ in range(args.rounds):
                for name, planner in planners.items():
                    cache = planner.cache
                    cache.reset()
                    if past:
                        planner.runner(torch.randint(0, vocab, (1, past)), cache=cache)
                        cache.commit(past)

                    def call(planner=planner, cache=cache, window=window) -> None:
                        cache.num_pending = 0  # the same pending window again
                        planner.runner(cache=cache, **window)

                    call()
                    t0 = time.thread_time()
                    for _ in range(args.calls):
                        call()
                    us = (time.thread_time() - t0) / args.calls * 1e6
                    best[name] = min(best.get(name, us), us)
            ratio = best["onnxruntime"] / best["torch"]
            print(
                f"| {S} | {past} | {best['torch']:.0f} | {best['onnxruntime']:.0f} | {ratio:.2f} |"
            )


if __name__ == "__main__":
    main()
