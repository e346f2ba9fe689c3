"""Meta-World tasks, expert demonstrations, robot bags and the robot data set (skipped
without Meta-World / MuJoCo; CI installs them: the `sim` extra and libosmesa6). Kept short:
a 16×16 frame every many steps."""

from __future__ import annotations

import json

import numpy as np
import pytest

# blockplan.sim.manipulation sets MUJOCO_GL=osmesa (unless set): before mujoco is imported.
from blockplan.sim.manipulation import (
    ACTION_NAMES,
    JOINT_NAMES,
    ManipulationEnv,
    run_expert,
    seeds_of,
)
from tests.optional import importorskip

importorskip("metaworld")


@pytest.fixture(scope="module")
def reach():
    env = ManipulationEnv("reach", image_size=16)
    yield env
    env.close()


def test_a_seed_fixes_the_layout(reach):
    a = reach.reset(5).state
    b = reach.reset(5).state
    c = reach.reset(6).state
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[-3:], c[-3:])  # another goal
    assert list(seeds_of("val", 2)) == [100_000, 100_001]


def test_the_reset_frame_draws_the_goal_where_the_state_has_it(reach):
    """Meta-World moves the goal site after its last forward pass; the reset frame must show
    this episode's marker (not the previous layout's), at any seed order."""
    for seed in (5, 6, 5):
        obs = reach.reset(seed)
        drawn = reach.env.data.site("goal").xpos
        np.testing.assert_allclose(drawn, obs.state[36:39], atol=1e-9)
    assert reach.env.model.site("goal").size[0] == pytest.approx(0.035)


def test_the_scripted_expert_solves_reach_and_frames_come_when_asked(reach):
    demo = run_expert(reach, seed=3, render_every=50, max_steps=150, tail=2)
    assert demo.success and demo.success_step < 150
    assert len(demo.actions) == demo.success_step + 2
    assert demo.joints.shape == (len(demo.actions), len(JOINT_NAMES))
    assert demo.actions.shape[1] == len(ACTION_NAMES)
    assert np.all(np.abs(demo.actions) <= 1.0)
    assert sorted(demo.frames) == list(range(0, len(demo.actions), 50))
    assert demo.frames[0]["front"].shape == (16, 16, 3)
    assert set(demo.frames[0]) == {"front", "wrist"}


@pytest.mark.parametrize("task, radius", [("reach", 0.05), ("push", 0.05), ("pick-place", 0.07)])
def test_the_task_distance_is_what_success_is_judged_on(task, radius):
    """The closed loop reports how close a failure came (`final_distance_m`): the distance
    must be the one Meta-World's success tests, so it crosses the radius where success does."""
    from blockplan.closedloop.robot import expert_actor, run_episode

    env = ManipulationEnv(task, image_size=16)
    try:
        env.reset(900_000)
        start = env.task_distance()
        result = run_episode(env, "expert", 900_000, expert_actor(env), 150, render_every=151)
        assert result.success
        assert result.extra["final_distance_m"] < radius < start
        assert result.extra["closest_distance_m"] <= result.extra["final_distance_m"]
        # the same run one step short of its success: not yet within the radius
        env.reset(900_000)
        for _ in range(result.steps - 1):
            env.step(env.expert_action(), render=False)
        assert not env.success
        assert env.task_distance() >= radius
    finally:
        env.close()


def test_a_demonstration_bag_reads_back_step_for_step(reach, tmp_path):
    from blockplan.bags import open_bag_reader
    from blockplan.sim.robot_bag import read_demo_bag, write_demo_bag

    demo = run_expert(reach, seed=4, render_every=8, max_steps=20)
    path = tmp_path / "demo.mcap"
    write_demo_bag(demo, path)
    with open_bag_reader(path) as reader:
        types = {t: s.msgtype for t, s in reader.topics.items()}
    assert types["/joint_states"] == "sensor_msgs/msg/JointState"
    assert types["/camera/front/image_raw"] == "sensor_msgs/msg/Image"
    assert types["/servo_node/delta_twist_cmds"] == "geometry_msgs/msg/TwistStamped"
    assert types["/instruction"] == "std_msgs/msg/String"
    back = read_demo_bag(path)
    assert back.instruction == "reach the red goal marker"
    np.testing.assert_array_equal(back.joints, demo.joints)
    np.testing.assert_allclose(back.actions, demo.actions, atol=1e-12)
    for t in range(len(demo.actions)):  # a camera slower than the steps holds its frame
        held = 8 * (t // 8)
        np.testing.assert_array_equal(back.frames[t, 0], demo.frames[held]["front"])
        np.testing.assert_array_equal(back.frames[t, 1], demo.frames[held]["wrist"])
    assert back.info["seed"] == 4 and back.info["task"] == "reach"
    # the simulator's ground truth for the scene targets: the goal where Meta-World put
    # it, the object where it lies, the hand where it is, step for step
    assert types["/sim/goal/position"] == "geometry_msgs/msg/PointStamped"
    np.testing.assert_allclose(back.scene, demo.scene, atol=1e-12)
    assert types["/sim/hand/position"] == "geometry_msgs/msg/PointStamped"
    np.testing.assert_allclose(back.scene[:, 3:6], np.tile(reach.env._target_pos, (20, 1)))
    start = reach.reset(4).state
    np.testing.assert_allclose(back.scene[0, :3], start[4:7])
    np.testing.assert_allclose(back.scene[0, 6:], start[:3])  # the hand


def test_robot_demos_resume_and_build_a_data_set_split_by_seed(tmp_path):
    from blockplan.sim.robot_demos import build_dataset, record_demos
    from blockplan.train.robot_data import episodes_of, read_robot_manifest

    counts = {"train": 1, "val": 1}
    first = record_demos(tmp_path, ["reach"], counts, render_every=40, image_size=16, max_steps=150)
    assert first == {"recorded": 2, "kept": 0, "planned": 2}
    again = record_demos(tmp_path, ["reach"], counts, render_every=40, image_size=16)
    assert again == {"recorded": 0, "kept": 2, "planned": 2}
    dataset = build_dataset(tmp_path)
    manifest = read_robot_manifest(dataset)
    assert manifest["proprio_dim"] == 9 and manifest["action_dim"] == 4
    assert [e["task"] for e in manifest["episodes"]] == ["reach/seed_0", "reach/seed_100000"]
    train = episodes_of(dataset, "train")
    assert len(train) == 1 and train[0]["frames"].shape[1:] == (2, 16, 16, 3)
    assert train[0]["scene"].shape == (manifest["episodes"][0]["num_steps"], 9)
    assert json.loads((dataset / "counts.json").read_text())["failed"] == {}


def test_noise_injected_demonstrations_label_the_drifted_states_with_the_clean_expert(reach):
    clean = run_expert(reach, seed=6, render_every=100, max_steps=30)
    noisy = run_expert(reach, seed=6, render_every=100, max_steps=30, action_noise=0.3)
    again = run_expert(reach, seed=6, render_every=100, max_steps=30, action_noise=0.3)
    np.testing.assert_array_equal(noisy.joints, again.joints)  # seeded
    np.testing.assert_array_equal(noisy.actions[0], clean.actions[0])  # the same first state
    assert not np.allclose(noisy.joints[-1], clean.joints[-1])  # the arm drifted off its path
    # Every recorded action is the expert's own at the state reached: replaying the executed
    # (noisy) actions visits the same states, where the expert says what was recorded.
    rng = np.random.default_rng([6, 0xDA27])
    reach.reset(6)
    for label in noisy.actions:
        np.testing.assert_allclose(reach.expert_action(), label, atol=1e-12)
        executed = label.copy()
        executed[:-1] += rng.normal(0.0, 0.3, len(label) - 1)
        reach.step(executed, render=False)
    with pytest.raises(ValueError, match="action_noise"):
        run_expert(reach, seed=6, action_noise=-0.1)


def test_scene_frames_label_many_layouts_resume_and_load_per_camera(tmp_path):
    """`blockplan robot-scenes`: per seed the reset frame and frames after noisy expert
    stretches, each with the state's object, goal and hand; shards resume; the loader picks
    the cameras a model reads and refuses another image size."""
    from blockplan.cli import main
    from blockplan.errors import UserError
    from blockplan.sim.manipulation import scene_of
    from blockplan.sim.scene_frames import (
        SCENE_SEED_BASE,
        load_scene_frames,
        record_scene_frames,
        shard_path,
    )

    out = tmp_path / "scenes"
    argv = ["robot-scenes", "--out", str(out), "--tasks", "reach", "--seeds", "3"]
    argv += ["--frames-per-seed", "2", "--max-gap", "5", "--image-size", "16", "--block", "2"]
    assert main(argv) == 0
    first = shard_path(out, "reach", SCENE_SEED_BASE, SCENE_SEED_BASE + 1)
    assert first.is_file() and shard_path(out, "reach", *(SCENE_SEED_BASE + 2,) * 2).is_file()
    stamp = first.stat().st_mtime_ns
    assert main(argv) == 0  # resumed: nothing rewritten
    assert first.stat().st_mtime_ns == stamp

    frames = load_scene_frames(out, ["wrist"], 16)
    assert frames.images.shape == (6, 1, 16, 16, 3) and frames.images.dtype == np.uint8
    assert frames.seed.tolist() == [SCENE_SEED_BASE + i // 2 for i in range(6)]
    env = ManipulationEnv("reach", image_size=16, cameras=("front", "wrist"))
    try:
        reset = env.reset(SCENE_SEED_BASE + 1)
        np.testing.assert_allclose(frames.scene[2], scene_of(reset.state), atol=1e-6)
        np.testing.assert_array_equal(frames.images[2, 0], reset.frames["wrist"])
    finally:
        env.close()
    same_goal = frames.scene[2, 3:6] == frames.scene[3, 3:6]
    assert same_goal.all() and not np.allclose(frames.scene[2, 6:], frames.scene[3, 6:])
    assert not np.allclose(frames.scene[0, 3:6], frames.scene[2, 3:6])  # another layout
    with pytest.raises(UserError, match="16-pixel"):
        load_scene_frames(out, ["front"], 64)
    with pytest.raises(UserError, match="camera"):
        load_scene_frames(out, ["left"])
    with pytest.raises(UserError, match="other image_size"):  # one folder, one recipe
        record_scene_frames(out, ["reach"], 3, frames_per_seed=2, max_gap=5, image_size=32)
