"""Does a robot policy read the goal from its cameras? Its first action against the expert's.

    python scripts/robot_first_action.py MODEL_DIR reach [--train-seeds] [--episodes 20]

At reset only the goal (and the object) differ between episodes, so the first action of an
episode must follow them. Per end-effector axis: the correlation of the model's first action
(step 0 of the chunk it plans at reset) with the scripted expert's, and the mean absolute
difference, over unseen seeds 900000… (or the training seeds).
"""

from __future__ import annotations

import argparse

import numpy as np

from blockplan.commands.closed_loop import robot_planner
from blockplan.sim.manipulation import CONTROL_PERIOD_S, ManipulationEnv, seeds_of
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
    model, expert = [], []
    for seed in seeds:
        obs = env.reset(seed)
        frames = [CameraFrame(name, 0, obs.frames[name]) for name in cameras]
        plan = planner.plan(RobotObservation(0, frames, obs.joints, env.instruction))
        model.append(plan.actions[0][:3])
        expert.append(np.clip(env.expert_action()[:3], -1.0, 1.0))
    env.close()
    m, e = np.array(model), np.array(expert)
    for d, axis in enumerate(("dx", "dy", "dz")):
        corr = (
            np.corrcoef(m[:, d], e[:, d])[0, 1]
            if e[:, d].std() > 0 and m[:, d].std() > 0
            else float("nan")
        )
        print(f"{axis}: correlation {corr:+.2f}, MAE {np.abs(m[:, d] - e[:, d]).mean():.3f}, "
              f"expert std {e[:, d].std():.3f}, model std {m[:, d].std():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
