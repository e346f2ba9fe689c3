"""Can a model's vision tower see where the ego sits in its lane? Linear probes on highway
samples (docs/BENCHMARKS.md "Closed loop", the lane-offset finding).

    python scripts/lane_probe.py DATA_DIR [--model models/blockplan-tiny] [--train 120] [--test 40]

Targets, at each sample's t0 (the newest history row): the ego's left-positive offset from
its lane's centre line (highway lanes are straight, 4 m apart, centres at y = 0, -4, -8, -12
m in REP-103), and its heading (the lanes run along x). Features, from the newest frame:
* the visual tokens the decoder reads (all cameras, after the pooling to the token grid and
  the projector, before the identity embeddings);
* the front camera's convolution map before the pooling;
* the front camera's pixels at the model's input size, grey.
A ridge regression per feature set and target is fitted on the train split's highway
episodes and scored on the test split's (the regularisation picked by test RMSE: an upper
bound of what a linear read-out gets). RMSE is reported over all test samples and over the
off-centre ones (|offset| > 0.3 m, |heading| > 0.03 rad), with the correlation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from blockplan.model.weights import load_pretrained

LANE_WIDTH_M = 4.0
FRONT = 1  # camera index in the data set's (front_left, front, front_right, rear)
LAMBDAS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)


def features(vision, files: list[Path]) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {
        "tokens": [],
        "conv": [],
        "pixels": [],
        "off": [],
        "yaw": [],
    }
    for f in files:
        z = np.load(f)
        images = torch.from_numpy(z["images"][:, :, -1])  # (S, K, H, W, 3) newest frame
        S, K = images.shape[:2]
        x = vision.preprocess(images.reshape(S * K, *images.shape[2:]))  # (S*K, 3, h, w)
        with torch.no_grad():
            out["tokens"].append(vision.project(x).reshape(S, -1).numpy())
            conv = vision.encoder.stages(x)  # (S*K, C, h', w')
        out["conv"].append(conv.reshape(S, K, -1)[:, FRONT].numpy())
        out["pixels"].append(x.reshape(S, K, *x.shape[1:])[:, FRONT].mean(1).reshape(S, -1).numpy())
        y = z["history_states"][:, -1, 2]  # (S,) world y at t0
        out["off"].append(y - np.round(y / LANE_WIDTH_M) * LANE_WIDTH_M)
        out["yaw"].append(z["history_states"][:, -1, 3])
    return {k: np.concatenate(v) for k, v in out.items()}


def ridge(train_x, train_y, test_x, lam: float) -> np.ndarray:
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mu) / sd, (test_x - mu) / sd
    w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ (train_y - train_y.mean()))
    return b @ w + train_y.mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--model", default="models/blockplan-tiny")
    parser.add_argument("--train", type=int, default=120, help="highway train episodes")
    parser.add_argument("--test", type=int, default=40, help="highway test episodes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vision = load_pretrained(args.model).eval().visual.float()
    train = features(vision, sorted((args.data / "train").glob("highway-*.npz"))[: args.train])
    test = features(vision, sorted((args.data / "test").glob("highway-*.npz"))[: args.test])
    share = np.mean(np.abs(test["off"]) > 0.3)
    print(
        f"{len(train['off'])} train / {len(test['off'])} test samples; test off-centre {share:.0%}"
    )
    names = {
        "tokens": "visual tokens (all cameras)",
        "conv": "front conv map before pooling",
        "pixels": "front pixels, grey",
    }
    for key, name in names.items():
        for target, cut in (("off", 0.3), ("yaw", 0.03)):
            truth = test[target]
            best = None
            for lam in LAMBDAS:
                pred = ridge(train[key], train[target], test[key], lam)
                rmse = float(np.sqrt(np.mean((pred - truth) ** 2)))
                if best is None or rmse < best[0]:
                    off = np.abs(truth) > cut
                    rmse_off = float(np.sqrt(np.mean((pred[off] - truth[off]) ** 2)))
                    best = (rmse, rmse_off, float(np.corrcoef(pred, truth)[0, 1]), lam)
            mean = float(np.sqrt(np.mean((truth - train[target].mean()) ** 2)))
            label = "offset (m)" if target == "off" else "heading (rad)"
            print(
                f"{name:30s} {label:13s} RMSE {best[0]:.3f} (the mean: {mean:.3f}), "
                f"off-centre {best[1]:.3f}, r {best[2]:.2f}, lambda {best[3]:g}"
            )


if __name__ == "__main__":
    main()
