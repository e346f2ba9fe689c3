"""Does a robot policy read the goal from its cameras? Its first action against the expert's.

    python scripts/robot_first_action.py MODEL_DIR reach [--train-seeds] [--episodes 20]

At reset only the goal (and the object) differ between episodes, so the first action of an
episode must follow them. Per end-effector axis: the correlation of the model's first action
(step 0 of the chunk it plans at reset) with the scripted expert's, and the mean absolute
difference, over unseen seeds 900000… (or the training seeds). A model with a scene token
(docs/ALGORITHMS.md §8.3) also gets its scene head's error against the simulator's object,
goal and hand positions at reset, per camera (RMS over the three coordinates, cm).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from blockplan.commands.closed_loop import robot_planner
from blockplan.sim.manipulation import CONTROL_PERIOD_S, ManipulationEnv, scene_of, seeds_of
from blockplan.train.distill import SCENE_CENTRE, SCENE_SCALE
from blockplan.types import CameraFrame, RobotObservation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("task")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--train-seeds", action="store_true")
    args = parser.parse_args()
    config, planner = robot_planner(args.model, None, ["model.num_threads=1"],
                                    1.0 / CONTROL_PERIOD_S)  # fmt: skip
    cameras = tuple(planner.model.config.camera_names)
    env = ManipulationEnv(args.task, 64, cameras)
    first = 0 if args.train_seeds else 900000
    seeds = (
        seeds_of("train", args.episodes)
        if args.train_seeds
        else range(first, first + args.episodes)
    )
    model, expert, errors = [], [], []
    has_scene = bool(planner.model.config.vision.scene)
    for seed in seeds:
        obs = env.reset(seed)
        frames = [CameraFrame(name, 0, obs.frames[name]) for name in cameras]
        plan = planner.plan(RobotObservation(0, frames, obs.joints, env.instruction))
        model.append(plan.actions[0][:3])
        expert.append(np.clip(env.expert_action()[:3], -1.0, 1.0))
        if has_scene:
            errors.append(scene_error(planner, [obs.frames[c] for c in cameras], obs.state))
    env.close()
    if has_scene:  # (episodes, cameras, 3 things)
        rms = np.sqrt((np.array(errors) ** 2).mean(axis=0)) * 100
        for k, camera in enumerate(cameras):
            print(f"scene head, {camera}: RMS error object {rms[k, 0]:.1f} cm, goal "
                  f"{rms[k, 1]:.1f} cm, hand {rms[k, 2]:.1f} cm")  # fmt: skip
    m, e = np.array(model), np.array(expert)
    for d, axis in enumerate(("dx", "dy", "dz")):
        corr = (
            np.corrcoef(m[:, d], e[:, d])[0, 1]
            if e[:, d].std() > 0 and m[:, d].std() > 0
            else float("nan")
        )
        print(f"{axis}: correlation {corr:+.2f}, MAE {np.abs(m[:, d] - e[:, d]).mean():.3f}, "
              f"expert std {e[:, d].std():.3f}, model std {m[:, d].std():.3f}")  # fmt: skip


def scene_error(planner, images: list[np.ndarray], state: np.ndarray) -> np.ndarray:
    """(cameras, 3): per camera the scene head's error (m, RMS over xyz) for the object,
    the goal and the hand."""
    tower = planner.model.visual
    pixels = tower.preprocess(torch.from_numpy(np.stack(images)))
    with torch.no_grad():
        _, scene = tower.encoder.tokens_and_scene(pixels.to(tower.camera_embed.weight.dtype))
    predicted = scene.double().numpy() * np.array(SCENE_SCALE) + np.array(SCENE_CENTRE)
    error = (predicted - scene_of(state)).reshape(len(images), 3, 3)
    return np.sqrt((error**2).mean(axis=2))


if __name__ == "__main__":
    main()
