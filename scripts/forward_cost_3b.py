"""CPU time of single decoder forwards at the Qwen2.5-VL-3B text shape with 2 layers (the
`bench --random-init qwen2.5-vl-3b --layers 2` smoke run's decoder): an AR step and a
32-token verify window against a 1340-slot past (the smoke run's prompt), min
`time.thread_time` over a few repetitions. Runs against whatever `blockplan` the PYTHONPATH
names (a tree without `logit_rows` computes every row's logits):

    PYTHONPATH=<tree>/src python scripts/forward_cost_3b.py --reps 4
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import time

import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.model.decoder import Decoder
from blockplan.model.masks import causal_mask
from blockplan.model.qwen2_5_vl.presets import qwen2_5_vl_3b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--past", type=int, default=1340)
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = qwen2_5_vl_3b(151936).decoder
    config = dataclasses.replace(text, num_hidden_layers=2, mrope_section=None)
    torch.manual_seed(0)
    decoder = Decoder(config).eval()
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0.0, 0.02)
    past = args.past
    cache = KVCache.for_model(config, past + 64, 1)
    cache.length = past
    one, window = torch.randint(0, 1000, (1, 1)), torch.randint(0, 1000, (1, 32))
    rows = torch.tensor([3, 9, 17, 25, 31])  # the slots a verify's picker reads
    has_rows = "logit_rows" in inspect.signature(Decoder.forward).parameters
    only = {"logit_rows": rows} if has_rows else {}
    forwards = {
        "ar_step": lambda: decoder(one, mask=causal_mask(1, past), cache=cache, num_logits=1),
        "verify_w32": lambda: decoder(window, mask=causal_mask(32, past), cache=cache, **only),
    }
    best = dict.fromkeys(forwards, float("inf"))
    with torch.no_grad():
        for _ in range(args.reps):
            for name, forward in forwards.items():
                cache.num_pending = 0
                t0 = time.thread_time()
                forward()
                best[name] = min(best[name], (time.thread_time() - t0) * 1e3)
    rows_note = len(rows) if has_rows else 32
    print({name: round(ms, 1) for name, ms in best.items()}, f"verify logit rows {rows_note}")


if __name__ == "__main__":
    main()
