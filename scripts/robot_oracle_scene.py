"""Diagnostic: the robot policy in closed loop with its scene head replaced by the truth.

    python scripts/robot_oracle_scene.py MODEL_DIR TASK [EPISODES] [FIRST_SEED]

A scene-token model's decoder reads the object's, the goal's and the hand's positions from
one token per image. Here every image's token is made from the simulator's true positions
at that frame instead of the head's estimate, so the success rate is what the policy would
reach with perfect perception: it separates "cannot see" from "cannot act"
(docs/BENCHMARKS.md "Robots"). Prints the command's JSON for the model only.
"""

from __future__ import annotations

import json
import sys

import torch

from blockplan.closedloop.robot import evaluate_robot
from blockplan.commands.closed_loop import robot_planner
from blockplan.model import vision
from blockplan.sim import manipulation
from blockplan.sim.manipulation import CONTROL_PERIOD_S, scene_of
from blockplan.train.distill import SCENE_CENTRE, SCENE_SCALE

TRUTH: dict[str, torch.Tensor] = {}


def main() -> None:
    folder, task = sys.argv[1], sys.argv[2]
    episodes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 900000
    torch.set_num_threads(1)
    centre, scale = torch.tensor(SCENE_CENTRE), torch.tensor(SCENE_SCALE)

    observe = manipulation.ManipulationEnv.observe

    def observe_with_truth(self, render):
        obs = observe(self, render)
        TRUTH["scene"] = (torch.from_numpy(scene_of(obs.state)).float() - centre) / scale
        return obs

    extend = vision.SmallCNN.extend

    def extend_with_truth(self, cells, found):
        tokens, scene = extend(self, cells, found)
        if not self.num_scene:
            return tokens, scene
        truth = TRUTH["scene"].to(scene.dtype).expand_as(scene)
        tokens = tokens.clone()
        tokens[:, -1] = self.scene_embed(truth)
        return tokens, truth

    manipulation.ManipulationEnv.observe = observe_with_truth
    vision.SmallCNN.extend = extend_with_truth
    # torch: the truth goes in through the torch vision tower patched above
    config, planner = robot_planner(folder, None, ["model.backend=torch"], 1.0 / CONTROL_PERIOD_S)
    if not planner.model.config.vision.scene:
        raise SystemExit(f"{folder}: no scene token")
    seeds = list(range(first, first + episodes))
    doc = evaluate_robot(task, seeds, ["model"], planner, config, max_steps=120)
    print(json.dumps({"task": task, "oracle_scene": doc["model"]}))


if __name__ == "__main__":
    main()
