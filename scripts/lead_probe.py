"""Can a model's vision tower see how far the car ahead in the ego's lane is? Linear probes
on simulated bags (docs/BENCHMARKS.md "Closed loop", run d4's phantom brake).

    python scripts/lead_probe.py BAG... [--model models/blockplan-tiny] [--test-bags 4]

Each bag from `blockplan simulate` carries, per 10 Hz tick, the cameras and
`/ground_truth/labels`, whose facts hold the gap to the nearest car ahead in the ego's lane
and that car's speed (none when no car is in the lane ahead). Targets per tick:
* `close`: a car ahead in the lane within 60 m (the distance inside which the expert's
  explanations name a slower car), 0 / 1;
* `inv_gap`: 10 m / gap (0 without a car ahead), which weighs near cars most.
Features, from each tick's newest frame (the camera order of the model's config):
* the visual tokens the decoder reads (all cameras, after the pooling and the projector);
* the front camera's convolution map before the pooling;
* the front camera's pixels at the model's input size, grey.
A ridge regression per feature set and target is fitted on all but the last `--test-bags`
bags and scored on those (the regularisation picked by the test score: an upper bound of
what a linear read-out gets). For `close` the score is the accuracy of thresholding the
regression at 0.5, next to the majority class's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from lane_probe import ridge  # scripts/lane_probe.py: the same read-out

from blockplan.bags.images import decode_image
from blockplan.bags.io import open_bag_reader
from blockplan.model.weights import load_pretrained

CLOSE_M = 60.0
LAMBDAS = tuple(10.0**k for k in range(-1, 9))  # up to where the fit is the mean


def stamp_ns(msg) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def read_bag(path: Path, cameras: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(T, K, H, W, 3) newest frames of every labelled tick, (T,) lead gaps (inf: none)."""
    frames: dict[str, dict[int, np.ndarray]] = {c: {} for c in cameras}
    gaps: dict[int, float] = {}
    with open_bag_reader(path) as reader:
        for record, msg in reader.messages():
            if record.topic == "/ground_truth/labels":
                label = json.loads(msg.data)
                gaps[int(label["stamp_ns"])] = float(label["facts"].get("lead_gap_m", np.inf))
            for c in cameras:
                if record.topic == f"/camera/{c}/image_raw":
                    frames[c][stamp_ns(msg)] = decode_image(msg)
    ticks = sorted(t for t in gaps if all(t in frames[c] for c in cameras))
    images = np.stack([np.stack([frames[c][t] for c in cameras]) for t in ticks])
    return images, np.array([gaps[t] for t in ticks])


def features(model, bags: list[Path]) -> dict[str, np.ndarray]:
    vision = model.visual
    cameras = tuple(model.config.camera_names)
    front = cameras.index("front")
    out: dict[str, list[np.ndarray]] = {"tokens": [], "conv": [], "pixels": [], "gap": []}
    for bag in bags:
        images, gaps = read_bag(bag, cameras)
        T, K = images.shape[:2]
        x = vision.preprocess(torch.from_numpy(images.reshape(T * K, *images.shape[2:])))
        with torch.no_grad():
            out["tokens"].append(vision.project(x).reshape(T, -1).numpy())
            conv = vision.encoder.stages(x)
        out["conv"].append(conv.reshape(T, K, -1)[:, front].numpy())
        out["pixels"].append(x.reshape(T, K, *x.shape[1:])[:, front].mean(1).reshape(T, -1).numpy())
        out["gap"].append(gaps)
    return {k: np.concatenate(v) for k, v in out.items()}


def targets(gap: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "close": (gap < CLOSE_M).astype(np.float64),
        "inv_gap": np.where(np.isfinite(gap), 10.0 / gap, 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bags", type=Path, nargs="+")
    parser.add_argument("--model", default="models/blockplan-tiny")
    parser.add_argument("--test-bags", type=int, default=4, help="the last N bags score the fit")
    args = parser.parse_args()
    if len(args.bags) <= args.test_bags:
        parser.error(f"{len(args.bags)} bags: need more than --test-bags {args.test_bags}")
    torch.set_num_threads(1)
    model = load_pretrained(args.model).eval().float()
    train = features(model, args.bags[: -args.test_bags])
    test = features(model, args.bags[-args.test_bags :])
    ty, sy = targets(train["gap"]), targets(test["gap"])
    print(
        f"{len(train['gap'])} train / {len(test['gap'])} test ticks; a car ahead within "
        f"{CLOSE_M:.0f} m in {sy['close'].mean():.0%} of the test ticks"
    )
    names = {
        "tokens": "visual tokens (all cameras)",
        "conv": "front conv map before pooling",
        "pixels": "front pixels, grey",
    }
    majority = max(sy["close"].mean(), 1.0 - sy["close"].mean())
    for key, name in names.items():
        acc = max(
            float(np.mean((ridge(train[key], ty["close"], test[key], lam) > 0.5) == sy["close"]))
            for lam in LAMBDAS
        )
        r = max(
            float(
                np.corrcoef(ridge(train[key], ty["inv_gap"], test[key], lam), sy["inv_gap"])[0, 1]
            )
            for lam in LAMBDAS
        )
        print(f"{name:30s} close: accuracy {acc:.3f} (majority {majority:.3f});  10/gap: r {r:.2f}")


if __name__ == "__main__":
    main()
