"""The robot recipe: the data set format, diffusion-forcing noise, the two objectives and a
short `blockplan train --embodiment robot` run on a synthetic data set."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from blockplan.cli import main
from blockplan.model.planner_model import PlannerModel
from blockplan.planner.embodiment import robot_config
from blockplan.planner.planner import Planner
from blockplan.train.distill import ChunkDiffusionModule
from blockplan.train.forcing import (
    ChunkNoiseLayout,
    chunk_masks,
    draw_chunk_noise,
    forcing_ratios,
    plain_ratios,
)
from blockplan.train.robot_data import (
    RobotDataError,
    RobotDatasetWriter,
    chunk_at,
    data_ranges,
    episodes_of,
    frame_indices,
    read_robot_manifest,
    write_synthetic_dataset,
)
from blockplan.train.robot_examples import RobotRecipe, load_robot_examples
from blockplan.types import RobotObservation


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("robot-data")
    write_synthetic_dataset(root, {"train": 4, "val": 2}, num_steps=6)
    return root


@pytest.fixture(scope="module")
def recipe(data) -> RobotRecipe:
    return RobotRecipe.build("robot-test", data, horizon=3, num_bins=16)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_data_set_round_trips_and_checks_shapes(data, tmp_path):
    manifest = read_robot_manifest(data)
    assert manifest["camera_names"] == ["front", "wrist"] and manifest["action_dim"] == 3
    train = episodes_of(data, "train")
    assert len(train) == 4 and train[0]["frames"].shape == (6, 2, 16, 16, 3)
    assert train[0]["actions"].shape == (6, 3) and isinstance(train[0]["instruction"], str)
    ranges = data_ranges(data, quantile=0.0)
    actions = np.concatenate([e["actions"] for e in train])
    assert np.allclose(ranges["action_low"], actions.min(0), atol=1e-6)
    writer = RobotDatasetWriter(tmp_path, ("front",), proprio_dim=2, action_dim=3)
    frames = np.zeros((4, 1, 8, 8, 3), np.uint8)
    with pytest.raises(RobotDataError, match="actions"):
        writer.add("train", frames, np.zeros((4, 2)), np.zeros((4, 2)), "x")
    with pytest.raises(RobotDataError, match="split"):
        writer.add("dev", frames, np.zeros((4, 2)), np.zeros((4, 3)), "x")
    with pytest.raises(RobotDataError, match="no manifest.json"):
        read_robot_manifest(tmp_path / "none")


def test_chunks_repeat_the_last_action_and_frames_hold_the_first():
    actions = np.arange(12.0).reshape(4, 3)
    assert chunk_at(actions, 2, 3).tolist() == [[6, 7, 8], [9, 10, 11], [9, 10, 11]]
    assert frame_indices(1, 3, stride=1).tolist() == [0, 0, 1]
    assert frame_indices(5, 2, stride=2).tolist() == [3, 5]


def test_examples_encode_prompt_chunk_and_images(data, recipe):
    examples = load_robot_examples(data, "train", recipe)
    assert len(examples) == 4 * 6
    assert examples.prompt_ids.shape == (24, len(recipe.template))
    assert examples.answer_ids.shape == (24, len(recipe.scaffold))
    assert examples.images.shape == (24, 2, 16, 16, 3) and examples.actions.shape == (24, 3, 3)
    assert not (examples.answer_ids == recipe.scaffold.mask_id).any()
    assert recipe.model_config.embodiment == "robot" and recipe.model_config.block_size == 3


def test_diffusion_forcing_masks_later_blocks_more(recipe):
    layout = ChunkNoiseLayout.from_scaffold(recipe.scaffold)
    rng = np.random.default_rng(0)
    ratios = forcing_ratios(rng, 2000, layout.num_blocks)
    assert np.all(np.diff(ratios, axis=1) >= 0)  # monotone in the block index, per sample
    assert len(np.unique(ratios[:, 0].round(6))) > 1000  # randomised per sample
    masks = chunk_masks(layout, ratios, rng)
    assert not (masks & ~layout.is_maskable).any() and masks.any(axis=1).all()
    values = [(layout.block == k) & layout.is_maskable for k in range(layout.num_blocks)]
    per_block = [masks[:, v].mean() for v in values]  # expected 1/4, 1/2, 3/4
    assert per_block == sorted(per_block) and per_block[-1] - per_block[0] > 0.4
    plain = plain_ratios(rng, 5, layout.num_blocks)
    assert np.all(plain == plain[:, :1])
    ids = 100 + np.arange(len(recipe.scaffold))[None].repeat(3, 0)
    noisy, m = draw_chunk_noise(layout, ids, recipe.scaffold.mask_id, rng, forcing=True)
    assert np.array_equal(noisy == recipe.scaffold.mask_id, m)


def test_a_share_of_the_samples_is_masked_whole_when_asked(recipe):
    """`full_mask_share`: that share of the chunks is masked at every maskable value (the
    state a decode starts from); without it the draws are those of before."""
    layout = ChunkNoiseLayout.from_scaffold(recipe.scaffold)
    ids = 100 + np.arange(len(recipe.scaffold))[None].repeat(4000, 0)
    mask_id = recipe.scaffold.mask_id
    for forcing in (False, True):
        _, before = draw_chunk_noise(layout, ids, mask_id, np.random.default_rng(3), forcing)
        _, same = draw_chunk_noise(layout, ids, mask_id, np.random.default_rng(3), forcing, 0.0)
        assert np.array_equal(before, same)
        _, some = draw_chunk_noise(layout, ids, mask_id, np.random.default_rng(3), forcing, 0.3)
        whole = (some == layout.is_maskable).all(axis=1).mean()
        by_chance = (before == layout.is_maskable).all(axis=1).mean()
        assert abs(whole - (0.3 + 0.7 * by_chance)) < 0.03  # 0.3 asked, plus the draws'
        assert whole > by_chance + 0.2
        assert not (some & ~layout.is_maskable).any()
        _, every = draw_chunk_noise(layout, ids, mask_id, np.random.default_rng(3), forcing, 1.0)
        assert (every == layout.is_maskable).all()


def test_distillation_loss_is_zero_for_the_teachers_own_context(data, recipe):
    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config).double()
    teacher = ChunkDiffusionModule(model, recipe, "bidirectional")
    student = ChunkDiffusionModule(model, recipe, "block_causal")
    A = len(recipe.scaffold)
    assert teacher.mask[-A:, -A:].all()
    assert not student.mask[-A:, -A:].all()  # blocks do not see later blocks
    examples = load_robot_examples(data, "val", recipe)
    batch = examples.batch([0, 1, 2])
    layout = ChunkNoiseLayout.from_scaffold(recipe.scaffold)
    noisy, masks = draw_chunk_noise(
        layout, batch["answer_ids"].numpy(), recipe.scaffold.mask_id, np.random.default_rng(1), True
    )
    batch.update(noisy_ids=torch.from_numpy(noisy), masks=torch.from_numpy(masks))
    same = ChunkDiffusionModule(model, recipe, "bidirectional").distillation_loss(batch, teacher)
    assert float(same["kl"]) < 1e-9
    asymmetric = student.distillation_loss(batch, teacher)
    assert float(asymmetric["kl"]) > 1e-6
    asymmetric["loss"].backward()
    assert model.decoder.model.layers[0].mlp.up_proj.weight.grad is not None
    plain = teacher.diffusion_loss(batch)
    assert float(plain["ce"]) > 0 and 0 <= float(plain["accuracy"]) <= 1


def test_train_robot_smoke_run_writes_a_loadable_student_with_its_card(data, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--embodiment", "robot", "--data", str(data), "--out", str(out)]
    argv += ["--arch", "robot-test", "--steps", "3", "--teacher-steps", "4", "--batch-size", "4"]
    argv += ["--horizon", "3", "--bins", "16", "--log-every", "1", "--num-threads", "1"]
    argv += ["--device", "cpu", "--eval-samples", "2", "--val-samples", "4"]
    assert main(argv) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["teacher"]["steps"] == 4 and final["student"]["steps"] == 3
    assert {"section_diffusion", "pipelined", "full_diffusion"} <= set(final["evaluation"])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    phases = {r.get("phase") for r in records if r["event"] == "train"}
    assert phases == {"teacher", "student"}
    card = (out / "best" / "MODEL_CARD.md").read_text()
    for words in (
        "Teacher",
        "bidirectional",
        "masked-diffusion loss",
        "Student",
        "block-causal",
        "diffusion forcing",
        "KL(teacher || student)",
        "--embodiment robot",
    ):
        assert words in card
    config = robot_config(None, ("front", "wrist"), 1)
    planner = Planner.from_folder(out / "best", config)  # the manifest (with the card) checks
    assert planner.schema.horizon == 3 and planner.schema.num_bins == 16
    teacher = Planner.from_folder(out / "teacher", config)
    assert teacher.schema == planner.schema
    examples = load_robot_examples(
        data, "val", RobotRecipe.of_config(planner.model.config, planner.tokenizer)
    )
    frames = planner.format.synthetic(config, 0).frames
    obs = RobotObservation(0, frames, examples.proprio[0], str(examples.instruction[0]))
    assert planner.plan(obs).actions.shape == (3, 3)
    argv = ["bench", "--model", str(out / "best"), "--iters", "1", "--warmup", "0"]
    argv += ["--strategies", "full_diffusion,pipelined", "--no-compute-floor", "--threads", "1"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pipelined_speedup_vs_full_diffusion"] > 0
    assert report["model"]["weights"] == "sha256-verified"


def test_fine_tuning_keeps_the_folders_schema_on_data_with_other_ranges(data, tmp_path, capsys):
    base = ["train", "--embodiment", "robot", "--steps", "1", "--teacher-steps", "2"]
    base += ["--batch-size", "4", "--num-threads", "1", "--device", "cpu", "--eval-samples", "0"]
    base += ["--val-samples", "4", "--log-every", "1"]
    first = tmp_path / "first"
    argv = base + ["--data", str(data), "--out", str(first), "--arch", "robot-test"]
    assert main(argv + ["--horizon", "3", "--bins", "16", "--vision-keypoints", "2"]) == 0
    assert "--vision-keypoints 2" in (first / "best" / "MODEL_CARD.md").read_text()
    other = tmp_path / "other-data"  # another seed: other positions, other bin ranges
    write_synthetic_dataset(other, {"train": 4, "val": 2}, num_steps=6, seed=7)
    assert data_ranges(other, 0.01) != data_ranges(data, 0.01)
    tuned = tmp_path / "tuned"
    argv = base + ["--data", str(other), "--out", str(tuned), "--init-from", str(first / "best")]
    capsys.readouterr()
    assert main(argv) == 0
    config = robot_config(None, ("front", "wrist"), 1)
    before = Planner.from_folder(first / "best", config)
    after = Planner.from_folder(tuned / "best", config)
    # the folder's config, schema (bin ranges included) and size carry over
    assert isinstance(after.model, PlannerModel) and after.schema == before.schema
    assert after.model.config.to_dict() == before.model.config.to_dict()
    assert after.model.config.vision.keypoints == 2  # the keypoint token too
    changed = [
        n
        for n, p in after.model.state_dict().items()
        if not torch.equal(p, before.model.state_dict()[n])
    ]
    assert changed  # it trained
    card = (tuned / "best" / "MODEL_CARD.md").read_text()
    assert f"--init-from {first / 'best'}" in card and "--bins" not in card
    wider = tmp_path / "wider-data"  # another action dimension cannot fine-tune this folder
    write_synthetic_dataset(wider, {"train": 4, "val": 2}, num_steps=6, action_dim=4)
    argv = base + ["--data", str(wider), "--out", str(tmp_path / "x")]
    assert main(argv + ["--init-from", str(first / "best")]) == 2
    assert "action_dim=4, the model" in capsys.readouterr().err
    # a recipe flag the folder does not have is refused, not silently ignored
    argv = base + ["--data", str(other), "--out", str(tmp_path / "y")]
    assert main(argv + ["--init-from", str(first / "best"), "--bins", "32"]) == 2
    assert "--bins 32: --init-from" in capsys.readouterr().err


def test_the_scene_probe_trains_the_vision_tower_in_both_phases(data, tmp_path, capsys):
    """`--scene-weight`: the probe's loss reaches the vision tower (not the decoder), is
    logged in both phases and on validation, the command on the card carries it, and the
    student folder is a plain model; a data set without the scene is refused."""
    from blockplan.model.weights import read_state_dict
    from blockplan.train.robot_trainer import RobotTrainConfig, RobotTrainer
    from blockplan.train.trainer import TrainError

    recipe = RobotRecipe.build("robot-test", data, horizon=3, num_bins=16)
    examples = load_robot_examples(data, "train", recipe)
    assert np.isfinite(examples.scene).all()
    module = ChunkDiffusionModule(
        PlannerModel(recipe.model_config), recipe, "bidirectional", scene_probe=True
    )
    trainer = RobotTrainer(
        recipe, examples, tmp_path / "x", RobotTrainConfig(1, 1, batch_size=2, scene_weight=1)
    )
    batch = trainer.inputs(examples, [0, 1], np.random.default_rng(0), forcing=False)
    module.diffusion_loss(batch)["scene"].backward()
    grads = {n: p.grad for n, p in module.named_parameters()}
    assert grads["scene_head.head.weight"].abs().sum() > 0
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "visual" in n)
    assert all(g is None for n, g in grads.items() if n.startswith("model.decoder."))

    out = tmp_path / "run"
    argv = ["train", "--embodiment", "robot", "--data", str(data), "--out", str(out)]
    argv += ["--arch", "robot-test", "--steps", "2", "--teacher-steps", "2", "--batch-size", "4"]
    argv += ["--horizon", "3", "--bins", "16", "--log-every", "1", "--num-threads", "1"]
    argv += ["--device", "cpu", "--eval-samples", "0", "--val-samples", "4"]
    assert main([*argv, "--scene-weight", "0.5"]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["event"] == "train"]
    assert {r["phase"] for r in trained} == {"teacher", "student"}
    assert all("scene" in r for r in trained)
    assert all("val/scene" in r for r in records if r["event"] == "validate")
    assert "--scene-weight 0.5" in (out / "best" / "MODEL_CARD.md").read_text()
    assert not any("scene" in k for k in read_state_dict(out / "best"))

    examples.scene[:] = np.nan  # bags recorded before the scene topics
    with pytest.raises(TrainError, match="scene"):
        RobotTrainer(recipe, examples, tmp_path / "y", RobotTrainConfig(1, 1, scene_weight=1))


def test_the_scene_token_reads_out_the_scene_and_feeds_it_to_the_decoder(data, tmp_path, capsys):
    """`--vision-scene-token`: each image's scene head regresses the object, goal and hand
    positions and its embedding is one more visual token. The scene loss trains the head
    (through the tower), the policy's loss reaches the head through the token, the serving
    path computes the same tokens as training, and the folder keeps the head (it plans)."""
    from blockplan.model.pretrained import load_pretrained
    from blockplan.model.weights import read_state_dict
    from blockplan.train.robot_trainer import RobotTrainConfig, RobotTrainer
    from blockplan.train.trainer import TrainError

    plain = RobotRecipe.build("robot-test", data, horizon=3, num_bins=16)
    recipe = RobotRecipe.build("robot-test", data, horizon=3, num_bins=16, scene_token=True)
    mc = recipe.model_config
    assert mc.vision.scene == 9 and mc.tokens_per_image == plain.model_config.tokens_per_image + 1
    assert "scene" not in plain.model_config.to_dict()["vision_config"]
    torch.manual_seed(0)
    model = PlannerModel(mc)
    module = ChunkDiffusionModule(model, recipe, "bidirectional", scene_probe=True)
    assert module.scene_head is None  # the model's own head, no training-only probe
    examples = load_robot_examples(data, "train", recipe)
    trainer = RobotTrainer(
        recipe, examples, tmp_path / "x", RobotTrainConfig(1, 1, batch_size=2, scene_weight=1)
    )
    batch = trainer.inputs(examples, [0, 1], np.random.default_rng(0), forcing=False)
    out = module.diffusion_loss(batch)
    out["scene"].backward(retain_graph=True)
    head = model.visual.encoder.scene_head[0].weight
    assert head.grad.abs().sum() > 0 and model.visual.encoder.scene_embed.weight.grad is None
    model.zero_grad()
    module.diffusion_loss(batch)["loss"].backward()  # the policy's loss reads the token
    assert model.visual.encoder.scene_embed.weight.grad.abs().sum() > 0
    assert head.grad.abs().sum() > 0

    # serving (no scene_out) computes the very tokens training does; the last one is the scene's
    pixels = model.visual.preprocess(torch.from_numpy(examples.images[0]))
    with torch.no_grad():
        scene: list[torch.Tensor] = []
        trained = model.visual(pixels, scene_out=scene)
        served = model.visual(pixels)
        torch.testing.assert_close(served, trained, rtol=0, atol=0)
        assert scene[0].shape == (pixels.shape[0], 9)
        model.visual.encoder.scene_head[2].bias.add_(1.0)
        moved = model.visual(pixels)
    assert not torch.equal(moved[:, -1], served[:, -1])
    torch.testing.assert_close(moved[:, :-1], served[:, :-1], rtol=0, atol=0)

    with pytest.raises(TrainError, match="--scene-weight"):
        RobotTrainer(recipe, examples, tmp_path / "y", RobotTrainConfig(1, 1, scene_weight=0))

    run = tmp_path / "run"
    argv = ["train", "--embodiment", "robot", "--data", str(data), "--out", str(run)]
    argv += ["--arch", "robot-test", "--steps", "2", "--teacher-steps", "2", "--batch-size", "4"]
    argv += ["--horizon", "3", "--bins", "16", "--log-every", "1", "--num-threads", "1"]
    argv += ["--device", "cpu", "--eval-samples", "0", "--val-samples", "4"]
    assert main([*argv, "--vision-scene-token"]) == 2  # without the loss: refused
    assert "--scene-weight" in capsys.readouterr().err
    assert main([*argv, "--vision-scene-token", "--scene-weight", "0.5"]) == 0
    capsys.readouterr()
    assert "--vision-scene-token" in (run / "best" / "MODEL_CARD.md").read_text()
    assert any(k.startswith("visual.encoder.scene_head.") for k in read_state_dict(run / "best"))
    assert load_pretrained(run / "best").config.vision.scene == 9
    config = robot_config(None, ("front", "wrist"), 1)
    planner = Planner.from_folder(run / "best", config)
    frames = planner.format.synthetic(config, 0).frames
    obs = RobotObservation(0, frames, examples.proprio[0], str(examples.instruction[0]))
    assert planner.plan(obs).actions.shape == (3, 3)

    # the exported graphs (ONNX Runtime) compute the scene token too: the same actions
    argv = ["bench", "--model", str(run / "best"), "--backend", "torch,onnxruntime"]
    argv += ["--iters", "1", "--warmup", "0", "--strategies", "pipelined,section_diffusion"]
    assert main([*argv, "--no-compute-floor", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["identical_tokens_fraction"]["onnxruntime"] == {
        "pipelined": 1.0,
        "section_diffusion": 1.0,
    }


def test_scene_targets_without_the_hand_read_as_unknown(tmp_path):
    """Shards recorded before the hand (6 columns) load with the hand NaN, and the scene
    loss counts only the known values."""
    from blockplan.train.probe import probe_loss
    from blockplan.train.robot_data import full_scene

    old = np.arange(12, dtype=np.float32).reshape(2, 6)
    full = full_scene(old)
    assert full.shape == (2, 9) and np.isnan(full[:, 6:]).all()
    np.testing.assert_array_equal(full[:, :6], old)
    with pytest.raises(RobotDataError, match="scene"):
        full_scene(np.zeros((2, 5)))
    predicted = torch.zeros(2, 9, requires_grad=True)
    target = torch.from_numpy(full)
    loss = probe_loss(predicted, target)
    assert float(loss.detach()) == pytest.approx(float((target[:, :6] ** 2).mean()))
    loss.backward()
    assert predicted.grad[:, 6:].abs().sum() == 0


def test_tower_pretraining_on_scene_frames_then_keeps_the_perception_fixed(data, tmp_path, capsys):
    """`--tower-data`/`--tower-steps`: phase 0 trains the encoder and its scene head on the
    scene frames, then its convolutions, keypoints and scene head stay fixed in both policy
    phases while the token projections train; the card records the phase. Refused without
    a scene token or without steps."""
    from blockplan.model.weights import read_state_dict
    from blockplan.sim.scene_frames import FORMAT, load_scene_frames, shard_path, write_shard
    from blockplan.train.robot_trainer import (
        PERCEPTION,
        TEACHER,
        RobotTrainConfig,
        RobotTrainer,
    )
    from blockplan.train.trainer import TrainError

    recipe = RobotRecipe.build("robot-test", data, horizon=3, num_bins=16, scene_token=True)
    examples = load_robot_examples(data, "train", recipe)
    scenes = tmp_path / "scenes"
    cameras = list(recipe.model_config.camera_names)
    manifest = {"format": FORMAT, "cameras": cameras, "image_size": 16, "tasks": ["reach"]}
    scenes.mkdir()
    (scenes / "manifest.json").write_text(json.dumps(manifest))
    n = len(examples)
    write_shard(
        shard_path(scenes, "reach", 0, n - 1), examples.images, examples.scene, np.arange(n)
    )
    frames = load_scene_frames(scenes, cameras, 16)
    assert frames.images.shape[:2] == (n, len(cameras))

    config = RobotTrainConfig(2, 2, batch_size=2, scene_weight=1, tower_steps=4, tower_batch=4)
    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config)
    trainer = RobotTrainer(recipe, examples, tmp_path / "x", config, examples, tower_set=frames)
    (tmp_path / "x").mkdir()
    encoder = model.visual.encoder
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    record = trainer.run_tower_phase(model)
    assert record["steps"] == 4 and record["frames"] == n and "val/front_goal_cm" in record
    after = {k: v.clone() for k, v in encoder.state_dict().items()}
    assert not torch.equal(before["scene_head.0.weight"], after["scene_head.0.weight"])
    assert torch.equal(before["scene_embed.weight"], after["scene_embed.weight"])  # no path
    frozen = [k for k, p in encoder.named_parameters() if not p.requires_grad]
    assert frozen and all(k.startswith(PERCEPTION) for k in frozen)
    module = ChunkDiffusionModule(model, recipe, "bidirectional", scene_probe=True)
    trainer.run_phase(TEACHER, module, 2)
    for k in frozen:
        assert torch.equal(after[k], encoder.state_dict()[k]), k
    assert not torch.equal(after["scene_embed.weight"], encoder.state_dict()["scene_embed.weight"])

    with pytest.raises(TrainError, match="scene token"):
        plain = RobotRecipe.build("robot-test", data, horizon=3, num_bins=16)
        RobotTrainer(
            plain,
            load_robot_examples(data, "train", plain),
            tmp_path / "y",
            RobotTrainConfig(1, 1, tower_steps=1),
            tower_set=frames,
        )
    with pytest.raises(TrainError, match="tower_steps"):
        RobotTrainer(
            recipe,
            examples,
            tmp_path / "y",
            RobotTrainConfig(1, 1, scene_weight=1),
            tower_set=frames,
        )

    run = tmp_path / "run"
    argv = ["train", "--embodiment", "robot", "--data", str(data), "--out", str(run)]
    argv += ["--arch", "robot-test", "--steps", "2", "--teacher-steps", "2", "--batch-size", "4"]
    argv += ["--horizon", "3", "--bins", "16", "--log-every", "1", "--num-threads", "1"]
    argv += ["--device", "cpu", "--eval-samples", "0", "--val-samples", "4"]
    argv += ["--vision-scene-token", "--scene-weight", "0.5"]
    assert main([*argv, "--tower-data", str(scenes), "--tower-steps", "3"]) == 0
    capsys.readouterr()
    card = (run / "best" / "MODEL_CARD.md").read_text()
    assert "**Tower**" in card and f"--tower-data {scenes} --tower-steps 3" in card
    teacher, best = read_state_dict(run / "teacher"), read_state_dict(run / "best")
    fixed = [k for k in best if k.startswith("visual.encoder.stages.")]
    assert fixed and all(torch.equal(teacher[k], best[k]) for k in fixed)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if r.get("phase") == "tower"] == [1, 2, 3]

    # A fine-tune from the folder (no tower phase) keeps the pretrained perception fixed in
    # both phases, as the run that made it did; the rest trains.
    tuned = tmp_path / "tuned"
    tune = [a if a != str(run) else str(tuned) for a in argv]
    assert main([*tune, "--init-from", str(run / "teacher")]) == 0
    capsys.readouterr()
    tuned_teacher, tuned_best = read_state_dict(tuned / "teacher"), read_state_dict(tuned / "best")
    for k in fixed:
        assert torch.equal(teacher[k], tuned_teacher[k]) and torch.equal(teacher[k], tuned_best[k])
    decoder = [k for k in teacher if k.startswith("model.layers.")]
    assert decoder and any(not torch.equal(teacher[k], tuned_teacher[k]) for k in decoder)
