"""Training step time with tiled attention (model/tiles.py) against one dense masked call.

One SASD training step (forward, backward, AdamW) of a planner preset on a synthetic batch,
the two attentions in turn (round robin, so both see the same machine load), with the
median milliseconds of each and their ratio.

    python scripts/train_speed.py                  # the reference preset, batch 8, 1 thread
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from blockplan.model.planner_model import PlannerModel
from blockplan.train.trainer import init_weights

CAMERAS = ("front_left", "front", "front_right", "rear")


def vehicle_step(arch: str, batch: int, seed: int):
    from blockplan.train.objective import SASDModule, draw_noise
    from blockplan.train.recipe import Recipe

    recipe = Recipe.build(arch, CAMERAS, 2, ego_tokens=4)
    torch.manual_seed(seed)
    model = PlannerModel(recipe.model_config)
    init_weights(model)
    module = SASDModule(model, recipe)
    rng = np.random.default_rng(seed)
    prompt = torch.from_numpy(np.asarray(recipe.template.token_ids)[None].repeat(batch, 0))
    answer = rng.integers(10, recipe.tokenizer.vocab_size, (batch, len(recipe.scaffold)))
    v = recipe.model_config.vision
    shape = (batch, len(CAMERAS) * 2, v.image_height, v.image_width, 3)
    images = torch.from_numpy(rng.integers(0, 255, shape, dtype=np.uint8))
    history = torch.zeros(batch, recipe.schema.num_history, 6)
    noisy, masks = draw_noise(module.layout, answer, module.mask_id, rng)
    args = (prompt, torch.from_numpy(answer), images, torch.from_numpy(noisy))
    kwargs = {"noisy_masks": torch.from_numpy(masks), "ego_history": history}
    return module, lambda: module(*args, **kwargs)["loss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="reference")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    module, loss_fn = vehicle_step(args.arch, args.batch_size, args.seed)
    tiles = module.tiles
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
    variants = {"tiled": tiles, "dense": tiles.mask}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for step in range(args.steps + 1):
        for name, attention in variants.items():
            module.tiles = attention
            start = time.perf_counter()
            loss = loss_fn()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    S, L = tiles.shape
    print(
        json.dumps(
            {
                "arch": args.arch,
                "batch_size": args.batch_size,
                "threads": args.threads,
                "sequence": S,
                "scores_computed": round(tiles.area / (S * L), 3),
                "tiles": len(tiles.tiles),
                "step_ms": {k: round(v, 1) for k, v in ms.items()},
                "speedup": round(ms["dense"] / ms["tiled"], 2),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
