"""Where does a scene-token robot policy think things are? Its scene head at reset, per axis.

    python scripts/robot_scene_axes.py MODEL_DIR [TASK ...] [--episodes 20] [--encoder W.safetensors]

Per task and camera: the RMS error (cm) of the scene head's object, goal and hand positions
at the reset frame of unseen seeds 900000…, next to the spread of the true values across
the episodes (a head that reads nothing scores about the spread; docs/ALGORITHMS.md §8.3).
`--encoder` swaps in other vision-encoder weights (e.g. from scripts/robot_tower_scene.py).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from blockplan.commands.closed_loop import robot_planner
from blockplan.sim.manipulation import CONTROL_PERIOD_S, ManipulationEnv, scene_of
from blockplan.train.distill import SCENE_CENTRE, SCENE_SCALE

NAMES = [f"{thing}{axis}" for thing in ("object", "goal", "hand") for axis in "xyz"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("tasks", nargs="*", default=["reach", "push", "pick-place"])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--encoder", help="vision-encoder weights (safetensors) to use instead")
    args = parser.parse_args()
    _, planner = robot_planner(args.model, None, ["model.num_threads=1"], 1.0 / CONTROL_PERIOD_S)
    tower = planner.model.visual
    if not planner.model.config.vision.scene:
        raise SystemExit(f"{args.model}: no scene token (train with --vision-scene-token)")
    if args.encoder:
        from safetensors.torch import load_file

        tower.encoder.load_state_dict(load_file(args.encoder))
    cameras = tuple(planner.model.config.camera_names)
    for task in args.tasks:
        env = ManipulationEnv(task, 64, cameras)
        predicted, truth = [], []
        for seed in range(900000, 900000 + args.episodes):
            obs = env.reset(seed)
            images = np.stack([obs.frames[c] for c in cameras])
            pixels = tower.preprocess(torch.from_numpy(images))
            with torch.no_grad():
                _, scene = tower.encoder.tokens_and_scene(pixels)
            predicted.append(scene.double().numpy() * SCENE_SCALE + np.array(SCENE_CENTRE))
            truth.append(scene_of(obs.state))
        env.close()
        p, t = np.array(predicted), np.array(truth)  # (n, K, 9), (n, 9)
        for k, camera in enumerate(cameras):
            error = np.sqrt(((p[:, k] - t) ** 2).mean(axis=0)) * 100
            print(task, camera, " ".join(f"{n} {e:.1f}" for n, e in zip(NAMES, error, strict=True)))
        print(
            task,
            "spread",
            " ".join(f"{n} {e:.1f}" for n, e in zip(NAMES, t.std(0) * 100, strict=True)),
        )


if __name__ == "__main__":
    main()
