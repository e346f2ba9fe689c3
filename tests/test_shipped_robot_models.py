"""Every shipped robot model folder (models/*/config.json with `embodiment: robot`) as the user
gets it: params/robot.yaml loads it with its checksums verified, a tampered copy does not
load, the serving path ≡ the strategies' parity (pipelined with serial thresholds ≡ section
diffusion), `blockplan bench --model`, and with Meta-World installed the closed-loop command
and the demo, whose recorded run replays identically (live ≡ offline). The vehicle folders
are tests/test_shipped_models.py's."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from blockplan.cli import main
from blockplan.model.weights import read_config
from tests.optional import importorskip

REPO_ROOT = Path(__file__).resolve().parents[1]
ROBOT_MODELS = sorted(
    p
    for p in (REPO_ROOT / "models").glob("*")
    if (p / "config.json").is_file() and read_config(p).get("embodiment") == "robot"
)
pytestmark = pytest.mark.skipif(not ROBOT_MODELS, reason="no robot model folder in models/")
every_folder = pytest.mark.parametrize("folder", ROBOT_MODELS, ids=[p.name for p in ROBOT_MODELS])


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def robot_planner(folder: Path):
    from blockplan.commands.closed_loop import robot_planner as load

    return load(str(folder), None, ("model.num_threads=1",))


@every_folder
def test_the_folder_is_small_verified_and_documented(folder):
    from blockplan.model.weights import VERIFIED

    assert (folder / "model.safetensors").stat().st_size < 8 * 2**20  # a few MB
    config, planner = robot_planner(folder)
    assert planner.weights == VERIFIED
    assert config.camera_names == ("front", "wrist") and planner.schema.proprio_dim == 9
    card = (folder / "MODEL_CARD.md").read_text()
    for needed in ("Closed loop", "success", "blind", "expert", "Reproduce"):
        assert needed in card, needed


@every_folder
def test_a_tampered_copy_does_not_load(folder, tmp_path):
    from blockplan.config import load_config, package_root
    from blockplan.planner.loading import ModelLoadError, load_model

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    config = load_config(package_root() / "params" / "robot.yaml")
    with pytest.raises(ModelLoadError, match="sha256|checksum|manifest"):
        load_model(str(copy), config)


@every_folder
def test_pipelined_with_serial_thresholds_equals_section_diffusion(folder):
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_robot_observation

    config, planner = robot_planner(folder)
    serial = dataclasses.replace(
        config,
        pipeline=dataclasses.replace(config.pipeline, add_threshold=1.0, activate_threshold=1.0),
    )
    planner = Planner.from_folder(folder, serial)
    for seed in (0, 1):
        obs = synthetic_robot_observation(serial, seed, planner.schema)
        a = planner.decode(obs, "section_diffusion").result
        b = planner.decode(obs, "pipelined").result
        np.testing.assert_array_equal(a.tokens, b.tokens)


@every_folder
def test_bench_runs_on_the_folder(folder, tmp_path):
    report = tmp_path / "bench.json"
    args = [
        "bench",
        "--model",
        str(folder),
        "--strategies",
        "pipelined,section_diffusion",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--no-hf",
        "--threads",
        "1",
        "--json",
        str(report),
    ]
    assert main(args) == 0
    doc = json.loads(report.read_text())
    assert doc["strategies"]["pipelined"]["valid_fraction"] == 1.0


@every_folder
def test_closed_loop_and_the_demo_on_meta_world(folder, tmp_path):
    from blockplan.sim import manipulation  # noqa: F401  (MUJOCO_GL before mujoco loads)

    importorskip("metaworld")
    out = tmp_path / "cl.json"
    args = [
        "closed-loop",
        "--embodiment",
        "robot",
        "--task",
        "reach",
        "--episodes",
        "1",
        "--seed",
        "900000",
        "--policies",
        "model",
        "expert",
        "--max-steps",
        "12",
        "--model",
        str(folder),
        "--json",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    for policy in ("model", "expert"):
        assert 0.0 <= doc[policy]["success_rate"] <= 1.0
        assert 0 < doc[policy]["mean_steps"] <= 12
    assert doc["model"]["chunks"] == 6  # steps 0, 2, …, 10: the receding horizon (replan_steps 2)
    for episode in doc["episodes"]:  # how close each came, next to the runtime's counters
        extra = episode["extra"]
        assert 0.0 <= extra["closest_distance_m"] <= extra["final_distance_m"]
        if not episode["success"]:
            assert extra["final_distance_m"] >= 0.05
    assert "fallbacks" in doc["episodes"][0]["extra"]  # the model's episode comes first
    demo = tmp_path / "demo"
    args = [
        "demo",
        "--embodiment",
        "robot",
        "--out",
        str(demo),
        "--max-steps",
        "12",
        "--model",
        str(folder),
    ]
    assert main(args) == 0
    metrics = json.loads((demo / "metrics.json").read_text())
    # The recorded closed-loop run, replayed through the same runtime: the same commands.
    assert metrics["held_fraction"] == 0.0 and metrics["chunks"] == 6
    assert all(v <= 1e-9 for v in metrics["action_mae"].values()), metrics["action_mae"]
    assert (demo / "report.html").is_file() and (demo / "episode.mcap").is_file()
    # The robot bag replayed as a vehicle's: an error that says which flag it needs.
    args = ["replay", str(demo / "episode.mcap"), "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(args) == 1 and not (tmp_path / "r").exists()


@every_folder
def test_the_runtime_shows_the_model_what_training_showed_it(folder, tmp_path):
    """Train/serve parity: an expert episode recorded as a bag and built into a data set
    (`robot-demos`' path) gives the same prompt token ids and the same model-ready images
    at every step the runtime requests a chunk while the same episode runs in closed loop
    (the runtime fed as the node feeds it, the expert's actions applied)."""
    from blockplan.closedloop.robot import START_NS, model_actor, run_episode
    from blockplan.runtime.clock import VirtualClock
    from blockplan.runtime.robot import RobotRuntime
    from blockplan.sim.manipulation import (
        CONTROL_PERIOD_S,
        JOINT_NAMES,
        ManipulationEnv,
        run_expert,
    )
    from blockplan.sim.robot_bag import read_demo_bag, write_demo_bag
    from blockplan.sim.robot_demos import bag_path
    from blockplan.train.robot_data import RobotDatasetWriter
    from blockplan.train.robot_examples import RobotRecipe, load_robot_examples

    importorskip("metaworld")
    env = ManipulationEnv("reach", 64, ("front", "wrist"))
    try:
        demo = run_expert(env, 123, 4, 24)
        path = bag_path(tmp_path, "train", "reach", 123)
        path.parent.mkdir(parents=True)
        write_demo_bag(demo, path, extra={"split": "train", "render_every": 4})
        episode = read_demo_bag(path)  # as build_dataset reads it (which keeps only successes)
        data = tmp_path / "dataset"
        with RobotDatasetWriter(
            data, ("front", "wrist"), len(JOINT_NAMES), 4, CONTROL_PERIOD_S
        ) as w:
            w.add(
                "train",
                episode.frames,
                episode.joints.astype(np.float32),
                episode.actions.astype(np.float32),
                episode.instruction,
                task="reach/seed_123",
                stamp_ns=episode.stamp_ns - episode.stamp_ns[0],
            )
        recipe = RobotRecipe.of_folder(folder, data)
        examples = load_robot_examples(data, "train", recipe)
        config, planner = robot_planner(folder)
        # a chunk every 4 steps: exactly the steps the demonstration rendered (render_every 4)
        config = config.with_params({"robot.replan_steps": 4})
        seen = []

        class Recording:
            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def plan(self, observation):
                ids = np.asarray(self.inner.render(observation).token_ids)
                seen.append((observation.stamp_ns, ids, self.inner.images(observation)))
                return self.inner.plan(observation)

        clock = VirtualClock(START_NS)
        runtime = RobotRuntime(config, Recording(planner), clock, timing="ideal")
        feed = model_actor(runtime, clock, env.instruction, {})

        def act(t, stamp, obs):
            feed(t, stamp, obs)
            return env.expert_action()

        run_episode(env, "model", 123, act, len(demo.actions), 4)
        runtime.close()
    finally:
        env.close()
    period = round(CONTROL_PERIOD_S * 1e9)
    preprocess = planner.model.visual.preprocess
    assert len(seen) == len(demo.actions) // 4  # a chunk every replan_steps = 4 steps
    for stamp, ids, images in seen:
        t = (stamp - START_NS) // period
        np.testing.assert_array_equal(ids, examples.prompt_ids[t])
        trained = torch.cat(
            [preprocess(torch.from_numpy(im.copy())[None]) for im in examples.images[t]]
        )
        torch.testing.assert_close(images, trained, atol=0, rtol=0)
