"""Train only the vision encoder (and its scene head) of a scene-token robot folder on the
scene targets: does more training make the tower read the goal? (docs/BENCHMARKS.md "Robots")

    python scripts/robot_tower_scene.py MODEL_DIR DATA_DIR MINUTES OUT.safetensors

Batches of 32 training samples, every camera, AdamW lr 1e-3; writes the encoder's weights
(measure them with scripts/robot_scene_axes.py --encoder OUT.safetensors).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
from safetensors.torch import save_file

from blockplan.model.weights import load_pretrained
from blockplan.train.distill import SCENE_CENTRE, SCENE_SCALE
from blockplan.train.probe import probe_loss
from blockplan.train.robot_examples import RobotRecipe, load_robot_examples


def main() -> None:
    folder, data, minutes, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = load_pretrained(folder)
    examples = load_robot_examples(data, "train", RobotRecipe.of_folder(folder, data))
    tower = model.visual
    encoder = tower.encoder
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3, weight_decay=0.01)
    centre, scale = torch.tensor(SCENE_CENTRE), torch.tensor(SCENE_SCALE)
    known = np.nonzero(np.isfinite(examples.scene[:, :6]).all(axis=1))[0]
    rng = np.random.default_rng(0)
    start, step = time.time(), 0
    while time.time() - start < minutes * 60:
        idx = rng.choice(known, 32)
        images = torch.from_numpy(examples.images[idx])  # (B, K, H, W, 3)
        B, K = images.shape[:2]
        _, scene = encoder.tokens_and_scene(tower.preprocess(images.flatten(0, 1)))
        target = (torch.from_numpy(examples.scene[idx]) - centre) / scale
        loss = probe_loss(scene.reshape(B, K, -1), target[:, None].expand(B, K, -1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 500 == 0:
            print(f"step {step} ({time.time() - start:.0f} s): scene loss {loss.item():.4f}")
    save_file({k: v.contiguous() for k, v in encoder.state_dict().items()}, out)
    print(f"{step} steps; encoder weights in {out}")


if __name__ == "__main__":
    main()
