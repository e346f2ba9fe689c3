import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.model.pretrained import load_pretrained
from blockplan.train.distributed import parameter_digest
from blockplan.train.examples import load_shards
from blockplan.train.recipe import Recipe
from blockplan.train.trainer import TrainConfig, Trainer, TrainError
from blockplan.types import ROUTE_AHEAD_M

from .conftest import CAMERAS, NUM_FRAMES


def test_lr_schedule_warms_up_then_decays():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert cfg.lr_at(0) == pytest.approx(0.1)
    assert cfg.lr_at(9) == pytest.approx(1.0)
    assert cfg.lr_at(10) == pytest.approx(1.0)
    assert cfg.lr_at(55) == pytest.approx(0.55)
    assert cfg.lr_at(100) == pytest.approx(0.1)
    lrs = [cfg.lr_at(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_bad_config_is_rejected():
    with pytest.raises(TrainError):
        TrainConfig(steps=0)


def _straight_then_resumed(recipe, train, val, config, tmp_path):
    """A run to the end in tmp/a, and one stopped at step 2 then resumed in tmp/b: they must
    end with identical parameters. Returns (the straight run's result, the resumed trainer)."""
    straight = Trainer(recipe, train, tmp_path / "a", config, val_set=val, progress=False)
    final = straight.fit()
    interrupted = Trainer(recipe, train, tmp_path / "b", config, val_set=val, progress=False)
    interrupted.fit(until=2)
    resumed = Trainer(recipe, train, tmp_path / "b", config, val_set=val, progress=False)
    assert resumed.resume() and resumed.step == 2
    resumed.fit()
    assert parameter_digest(resumed.module) == parameter_digest(straight.module)
    return final, resumed


@pytest.mark.parametrize(
    "variant",
    [{}, {"ego_tokens": 2}, {"ego_tokens": 2, "trajectory_head": "flow"}],
    ids=["digits", "ego-encoder", "ego-encoder-flow"],
)
def test_resume_continues_exactly(variant, dataset_dir, tmp_path):
    # Every model part the checkpoint holds comes back (an ego-encoder run once could not resume).
    recipe = Recipe.build("test", CAMERAS, NUM_FRAMES, **variant)
    train = load_shards(dataset_dir, "train", recipe)
    if variant.get("trajectory_head") == "flow":
        recipe = recipe.with_flow_statistics(train.future_xy)
    val = load_shards(dataset_dir, "val", recipe)
    config = TrainConfig(
        steps=4, batch_size=2, warmup_steps=1, save_every=3, log_every=1, val_samples=2, seed=3
    )

    final, resumed = _straight_then_resumed(recipe, train, val, config, tmp_path)
    assert final["step"] == 4 and len(final["param_digests"]) == 1
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert {r["event"] for r in lines} == {"train", "checkpoint", "done"}
    model = load_pretrained(tmp_path / "b" / "best")  # the best folder is a loadable model
    assert model.num_parameters() == resumed.model.num_parameters()
    # ... with the training answers' n-gram table of its explanation, in its manifest
    from blockplan.decoding.ngrams import DRAFTS_NAME, read_drafts

    best = tmp_path / "b" / "best"
    assert DRAFTS_NAME in json.loads((best / "manifest.json").read_text())["sha256"]
    table = read_drafts(best, recipe.scaffold, recipe.model_config.decoder.vocab_size)
    assert table.sections == {"explanation"} and table.next_id


def test_init_from_copies_a_folders_weights(recipe, dataset_dir, tmp_path):
    train = load_shards(dataset_dir, "train", recipe)
    config = TrainConfig(steps=1, batch_size=2, seed=5)
    source = Trainer(recipe, train, tmp_path / "a", config, progress=False)
    folder = source.model.save_pretrained(tmp_path / "m", recipe.tokenizer.to_str())
    target = Trainer(
        recipe, train, tmp_path / "b", TrainConfig(steps=1, batch_size=2, seed=6), progress=False
    )
    assert parameter_digest(target.module) != parameter_digest(source.module)
    target.init_from(folder)
    assert parameter_digest(target.module) == parameter_digest(source.module)


def test_init_from_a_coarser_token_grid_resamples_the_cell_embeddings(
    recipe, dataset_dir, tmp_path, capsys
):
    import torch

    from blockplan.cli import main

    train = load_shards(dataset_dir, "train", recipe)
    source = Trainer(
        recipe, train, tmp_path / "a", TrainConfig(steps=1, batch_size=2), progress=False
    )
    folder = source.model.save_pretrained(tmp_path / "m", recipe.tokenizer.to_str())
    finer = Recipe.build("test", CAMERAS, NUM_FRAMES, vision_grid=(3, 4))
    assert finer.model_config.tokens_per_image == 12 != recipe.model_config.tokens_per_image
    fine_train = load_shards(dataset_dir, "train", finer)  # the prompts hold 12 per image
    target = Trainer(
        finer,
        fine_train,
        tmp_path / "b",
        TrainConfig(steps=1, batch_size=2, seed=6),
        progress=False,
    )
    target.init_from(folder)
    theirs, mine = source.model.state_dict(), target.model.state_dict()
    cells = "visual.cell_embed.weight"
    assert set(theirs) == set(mine)
    for name in theirs:  # everything else carries over as it was
        if name != cells:
            assert torch.equal(theirs[name], mine[name]), name
    old, new = theirs[cells].reshape(2, 2, -1), mine[cells].reshape(3, 4, -1)
    for (r, c), (R, C) in (((0, 0), (0, 0)), ((0, 1), (0, 3)), ((1, 0), (2, 0)), ((1, 1), (2, 3))):
        torch.testing.assert_close(new[R, C], old[r, c])  # the corners stay where they were
    torch.testing.assert_close(new[1, 0], (old[0, 0] + old[1, 0]) / 2)  # halfway down
    assert target.fit()["step"] == 1  # and it trains
    # Another encoder is not a grid change: refused, as any other architecture.
    other = Recipe.build("reference", CAMERAS, NUM_FRAMES, vision_grid=(3, 4))
    with pytest.raises(TrainError, match="architecture"):
        Trainer(
            other,
            load_shards(dataset_dir, "train", other),
            tmp_path / "c",
            TrainConfig(steps=1, batch_size=2),
            progress=False,
        ).init_from(folder)
    argv = ["train", "--data", str(dataset_dir), "--out", str(tmp_path / "d"), "--steps", "1"]
    assert main([*argv, "--vision-grid", "3by4"]) != 0
    assert "3by4" in capsys.readouterr().err


def test_init_from_another_image_size_carries_every_tensor_over(
    recipe, dataset_dir, tmp_path, capsys
):
    """`--image-size`: the tower's convolutions and the adaptive pooling do not depend on the
    input size, so a folder trained at one size starts a run at another unchanged."""
    import torch

    from blockplan.cli import main

    train = load_shards(dataset_dir, "train", recipe)
    source = Trainer(
        recipe, train, tmp_path / "a", TrainConfig(steps=1, batch_size=2), progress=False
    )
    folder = source.model.save_pretrained(tmp_path / "m", recipe.tokenizer.to_str())
    vision = recipe.model_config.vision
    size = (2 * vision.image_height, 2 * vision.image_width)
    larger = Recipe.build("test", CAMERAS, NUM_FRAMES, image_size=size)
    big_train = load_shards(dataset_dir, "train", larger)
    assert big_train.images.shape[2:4] == size  # the examples are kept at the new size
    target = Trainer(
        larger, big_train, tmp_path / "b", TrainConfig(steps=1, batch_size=2), progress=False
    )
    target.init_from(folder)
    theirs, mine = source.model.state_dict(), target.model.state_dict()
    assert set(theirs) == set(mine)
    for name in theirs:
        assert torch.equal(theirs[name], mine[name]), name
    assert target.fit()["step"] == 1  # and it trains at the new size
    saved = load_pretrained(tmp_path / "b" / "best")
    assert (saved.config.vision.image_height, saved.config.vision.image_width) == size
    argv = ["train", "--data", str(dataset_dir), "--out", str(tmp_path / "d"), "--steps", "1"]
    assert main([*argv, "--image-size", "96by160"]) != 0
    assert "96by160" in capsys.readouterr().err


def _futures(lateral_m: list[float]):
    import numpy as np

    xy = np.zeros((len(lateral_m), 20, 2))
    xy[:, :, 0] = np.linspace(1, 20, 20)
    xy[:, -1, 1] = lateral_m
    return xy


def test_epoch_pool_repeats_rare_lateral_samples_per_scenario():
    import collections

    import numpy as np

    from blockplan.train.trainer import epoch_pool

    # highway: 1 lateral of 10; roundabout: 3 of 4 (already above the share)
    lateral = [2.0] + [0.1] * 9 + [3.0, -3.0, 4.0, 0.2]
    episode = np.array(["highway-1"] * 10 + ["roundabout-7"] * 4)
    pool = epoch_pool(_futures(lateral), episode, share=0.3, threshold_m=1.0)
    counts = collections.Counter(pool.tolist())
    assert all(counts[i] >= 1 for i in range(14))  # nothing dropped
    # 0.3 * 0.9 / (0.1 * 0.7) = 3.86 -> 4 copies: 4 of 13 highway samples (31 %)
    assert counts[0] == 4 and all(counts[i] == 1 for i in range(1, 14))
    assert np.array_equal(epoch_pool(_futures(lateral), episode, 0.0, 1.0), np.arange(14))
    with pytest.raises(TrainError):
        TrainConfig(steps=1, lateral_share=1.0)


def test_trainer_draws_batches_from_the_pool(recipe, dataset_dir, tmp_path):
    train = load_shards(dataset_dir, "train", recipe)
    config = TrainConfig(steps=2, batch_size=2, lateral_share=0.5, lateral_threshold_m=0.5)
    trainer = Trainer(recipe, train, tmp_path / "run", config, progress=False)
    assert len(trainer.pool) >= len(train)
    drawn = [i for step in range(trainer.steps_per_epoch) for i in trainer.batch_indices(step)]
    assert set(drawn) <= set(range(len(train)))
    assert len(drawn) == trainer.steps_per_epoch * 2


def test_the_lane_pose_probe_trains_the_vision_tower_resumes_and_stays_out_of_the_model(
    recipe, dataset_dir, tmp_path
):
    """The probe's loss reaches the vision tower and the projector, not the decoder; the
    checkpoint carries the probe (a resumed run is the straight run); the model folder is a
    plain planner without it."""
    from blockplan.model.weights import read_state_dict

    train = load_shards(dataset_dir, "train", recipe)
    val = load_shards(dataset_dir, "val", recipe)
    config = TrainConfig(
        steps=4,
        batch_size=2,
        warmup_steps=1,
        save_every=3,
        log_every=1,
        val_samples=2,
        seed=3,
        lane_pose_weight=1.0,
    )
    trainer = Trainer(recipe, train, tmp_path / "g", config, val_set=val, progress=False)
    batch = trainer.inputs(train, [0, 1], np.random.default_rng(0))
    trainer.module(**batch)["lane_pose"].backward()
    grads = {n: p.grad for n, p in trainer.module.named_parameters()}
    assert grads["probes.lane_pose.head.weight"].abs().sum() > 0
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "visual" in n)
    assert all(g is None for n, g in grads.items() if n.startswith("model.decoder."))

    _straight_then_resumed(recipe, train, val, config, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert all("lane_pose" in r for r in lines if r["event"] == "train")
    plain = Trainer(recipe, train, tmp_path / "c", dataclasses.replace(config, lane_pose_weight=0))
    plain.save()
    keys = set(read_state_dict(tmp_path / "b" / "best"))
    assert keys == set(read_state_dict(tmp_path / "c" / "checkpoint" / "model"))
    assert not any("lane" in k for k in keys)


def test_the_lead_probe_trains_the_vision_tower_next_to_the_lane_probe_and_resumes(
    recipe, dataset_dir, tmp_path
):
    """Both probes at once: the lead probe's loss reaches the vision tower, not the decoder;
    samples without a car ahead count (target: none), unknown ones are skipped; the
    checkpoint carries both heads and a resumed run is the straight run."""
    from blockplan.train.checkpoint import PROBE_FILE
    from blockplan.train.probe import lead_targets

    train = load_shards(dataset_dir, "train", recipe)
    val = load_shards(dataset_dir, "val", recipe)
    assert np.isinf(train.lead[:, 0]).any() and np.isfinite(train.lead[:, 0]).any()
    config = TrainConfig(
        steps=4,
        batch_size=2,
        warmup_steps=1,
        save_every=3,
        log_every=1,
        val_samples=2,
        seed=5,
        lane_pose_weight=1.0,
        lead_weight=1.0,
    )
    trainer = Trainer(recipe, train, tmp_path / "g", config, val_set=val, progress=False)
    batch = trainer.inputs(train, [0, 1], np.random.default_rng(0))
    torch.testing.assert_close(batch["lead"], torch.from_numpy(train.lead[[0, 1]]), equal_nan=True)
    out = trainer.module(**batch)
    out["lead"].backward()
    grads = {n: p.grad for n, p in trainer.module.named_parameters()}
    assert grads["probes.lead.head.weight"].abs().sum() > 0
    assert grads["probes.lane_pose.head.weight"] is None
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "visual" in n)
    assert all(g is None for n, g in grads.items() if n.startswith("model.decoder."))
    # the loss is the mean squared error in the probe's units over the known targets
    with torch.no_grad():
        visual = [
            trainer.module.model.visual(trainer.module.model.visual.preprocess(im))
            for im in batch["images"]
        ]
        head = trainer.module.lead_head
        predicted = head(torch.stack(visual))
        target = (lead_targets(batch["lead"]) - head.centre) / head.scale
        torch.testing.assert_close(out["lead"].detach(), ((predicted - target) ** 2).mean())
        unknown = batch["lead"].clone()
        unknown[0] = float("nan")
        known = torch.isfinite(lead_targets(unknown))
        expected = (predicted - (lead_targets(unknown) - head.centre) / head.scale)[known] ** 2
        torch.testing.assert_close(
            head.loss(torch.stack(visual), lead_targets(unknown)), expected.mean()
        )

    _straight_then_resumed(recipe, train, val, config, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert all("lead" in r and "lane_pose" in r for r in lines if r["event"] == "train")
    from safetensors.torch import load_file

    heads = load_file(tmp_path / "b" / "checkpoint" / PROBE_FILE)
    assert {k.split(".")[0] for k in heads} == {"lane_pose", "lead"}


def test_lead_targets_tell_near_far_none_and_unknown_apart():
    from blockplan.train.probe import lead_targets

    lead = torch.tensor(
        [[50.0, 20.0], [140.0, 25.0], [float("inf"), float("nan")], [float("nan")] * 2, [2.0, 0.0]]
    )
    t = lead_targets(lead)
    torch.testing.assert_close(t[0], torch.tensor([0.2, 0.5]))
    torch.testing.assert_close(t[1], torch.tensor([10.0 / 140.0, 1.0]))
    torch.testing.assert_close(t[2], torch.tensor([0.0, 1.0]))  # none: like a far car
    assert torch.isnan(t[3]).all()  # unknown: skipped by the loss
    torch.testing.assert_close(t[4], torch.tensor([2.0, 0.02]))  # nearer than 5 m: capped


def test_the_lead_probe_needs_data_that_records_the_gap(recipe, dataset_dir):
    train = load_shards(dataset_dir, "train", recipe)
    train.lead[:] = np.nan  # data sets written before the gap was recorded
    with pytest.raises(TrainError, match="regenerate"):
        Trainer(recipe, train, "unused", TrainConfig(steps=1, lead_weight=1.0))


def test_the_lane_pose_probe_needs_data_that_records_the_lane_pose(recipe, dataset_dir):
    train = load_shards(dataset_dir, "train", recipe)
    train.lane_pose[:] = np.nan  # a data set written before the lane pose was recorded
    with pytest.raises(TrainError, match="lane pose"):
        Trainer(recipe, train, "unused", TrainConfig(steps=1, lane_pose_weight=1.0))


def _new_inputs_start_silent_then_train(source, target, folder, train, batch_key, count):
    """`target.init_from(folder)` (saved from `source`): the encoder's `count` new inputs come
    last at zero weight, so the loss is the folder's without them; `fit` then moves them."""
    import torch

    target.init_from(folder)
    weight = target.model.state_dict()["ego_encoder.net.0.weight"]
    theirs = source.model.state_dict()["ego_encoder.net.0.weight"]
    assert weight.shape[1] == theirs.shape[1] + count
    assert torch.count_nonzero(weight[:, -count:]) == 0
    batch = dict(target.inputs(train, [0, 1], np.random.default_rng(0)))
    shapes = {"beside_input": (2, 2, 5), "route_input": (2, len(ROUTE_AHEAD_M), 2)}
    assert batch[batch_key].shape == shapes.get(batch_key, (2, 2))
    with torch.no_grad():
        mine = target.module(**batch)["loss"]
        batch.pop(batch_key)
        before = source.module(**batch)["loss"]
    torch.testing.assert_close(mine, before)  # the new inputs are silent at first
    target.fit()
    weight = target.model.state_dict()["ego_encoder.net.0.weight"]
    assert torch.count_nonzero(weight[:, -count:]) > 0


def _new_inputs_go_before_the_last(source_recipe, recipe, train, config, where, last, new):
    """A folder of `source_recipe` (random encoder weights) starts a `recipe` run whose `new`
    inputs go in before the folder's `last` ones: those keep their weights, the new ones
    start at zero. Returns (the folder's trainer, the new run's)."""
    import torch

    first = Trainer(source_recipe, train, where / "s", TrainConfig(steps=1, batch_size=2, seed=6))
    torch.nn.init.normal_(first.model.ego_encoder.net[0].weight, std=0.5)
    folder = first.model.save_pretrained(where / "m", source_recipe.tokenizer.to_str())
    target = Trainer(recipe, train, where / "t", config, progress=False)
    target.init_from(folder)
    mine = target.model.state_dict()["ego_encoder.net.0.weight"]
    theirs = first.model.state_dict()["ego_encoder.net.0.weight"]
    torch.testing.assert_close(mine[:, -last:], theirs[:, -last:])
    assert torch.count_nonzero(mine[:, -last - new : -last]) == 0
    return first, target


def _run_that_adds_inputs(source_recipe, recipe, dataset_dir, tmp_path, batch_key, count):
    """A `recipe` run `--init-from` a folder of `source_recipe`: its new inputs start silent
    then train, and a resumed run is the straight run. Returns (train, config)."""
    train = load_shards(dataset_dir, "train", recipe)
    val = load_shards(dataset_dir, "val", recipe)
    source = Trainer(
        source_recipe, train, tmp_path / "s", TrainConfig(steps=1, batch_size=2, seed=5)
    )
    folder = source.model.save_pretrained(tmp_path / "m", source_recipe.tokenizer.to_str())
    config = TrainConfig(
        steps=4, batch_size=2, warmup_steps=1, save_every=3, log_every=1, val_samples=2, seed=3
    )
    target = Trainer(recipe, train, tmp_path / "t", config, progress=False)
    _new_inputs_start_silent_then_train(source, target, folder, train, batch_key, count)
    _straight_then_resumed(recipe, train, val, config, tmp_path)
    return train, config


def test_an_encoder_that_reads_the_lane_pose_starts_from_one_that_does_not_and_trains(
    dataset_dir, tmp_path
):
    """`--ego-lane-pose --init-from` a folder without it: the lane inputs start at zero
    weight, so the model first plans exactly as the folder did; training then moves them,
    a resumed run is the straight run, and the folder records the setting."""

    from blockplan.model.ego import LANE_INPUTS

    plain = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2)
    lane = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lane_pose=True)
    train, _ = _run_that_adds_inputs(plain, lane, dataset_dir, tmp_path, "lane_input", LANE_INPUTS)
    assert np.isfinite(train.lane_pose).all()
    model = load_pretrained(tmp_path / "b" / "best")
    assert model.config.ego_encoder.lane_pose


def test_lane_pose_dropout_hides_the_pose_from_the_encoder_for_a_share_of_samples(dataset_dir):
    lane = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lane_pose=True)
    train = load_shards(dataset_dir, "train", lane)
    every = list(range(len(train)))
    for dropout, hidden in ((0.0, 0), (1.0, len(every))):
        config = TrainConfig(steps=1, batch_size=2, lane_pose_dropout=dropout)
        trainer = Trainer(lane, train, "unused", config, progress=False)
        pose = trainer.inputs(train, every, np.random.default_rng(0))["lane_input"].numpy()
        assert int(np.isnan(pose).any(axis=1).sum()) == hidden
    train.lane_pose[:] = np.nan  # a data set written before the lane pose was recorded
    with pytest.raises(TrainError, match="ego_lane_pose"):
        Trainer(lane, train, "unused", TrainConfig(steps=1))


def test_an_encoder_that_reads_the_car_ahead_starts_from_one_that_does_not_and_trains(
    dataset_dir, tmp_path
):
    """`--ego-lead --init-from` a folder without it (one that reads the lane pose): the lead
    inputs come last and start at zero weight, so the model first plans exactly as the
    folder did; training moves them, a resumed run is the straight run, the folder records
    the setting, and --lead-dropout hides the car ahead for its share of samples."""
    import torch

    from blockplan.model.ego import LEAD_INPUTS

    lane = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lane_pose=True)
    lead = Recipe.build(
        "test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lane_pose=True, ego_lead=True
    )
    train, config = _run_that_adds_inputs(
        lane, lead, dataset_dir, tmp_path, "lead_input", LEAD_INPUTS
    )
    assert np.isinf(train.lead[:, 0]).any() and np.isfinite(train.lead[:, 0]).any()
    assert load_pretrained(tmp_path / "b" / "best").config.ego_encoder.lead

    # A folder that already reads the car ahead, and a run that adds the lane pose: the lane
    # inputs go in before the lead's, which stay last, and the model starts where it was.
    lead_only = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lead=True)
    first, both = _new_inputs_go_before_the_last(
        lead_only, lead, train, config, tmp_path / "l", LEAD_INPUTS, 3
    )
    batch = dict(both.inputs(train, [0, 1], np.random.default_rng(0)))
    with torch.no_grad():
        mine = both.module(**batch)["loss"]
        batch.pop("lane_input")
        torch.testing.assert_close(mine, first.module(**batch)["loss"])

    every = list(range(len(train)))
    for dropout, hidden in ((0.0, 0), (1.0, len(every))):
        cfg = TrainConfig(steps=1, batch_size=2, lead_dropout=dropout)
        trainer = Trainer(lead, train, "unused", cfg, progress=False)
        ahead = trainer.inputs(train, every, np.random.default_rng(0))["lead_input"].numpy()
        assert int(np.isnan(ahead[:, 0]).sum()) == hidden
    with pytest.raises(TrainError, match="lead_dropout"):
        TrainConfig(steps=1, lead_dropout=1.5)
    train.lead[:] = np.nan  # data sets written before the gap was recorded
    with pytest.raises(TrainError, match="ego_lead"):
        Trainer(lead, train, "unused", TrainConfig(steps=1))


def test_an_encoder_that_reads_the_lanes_beside_starts_from_one_that_reads_the_lead(
    dataset_dir, tmp_path
):
    """`--ego-beside --init-from` a folder that reads the lane pose and the car ahead (the
    shipped model's kind): the lanes-beside inputs come last at zero weight, so the model
    first plans exactly as the folder did; training moves them, a resumed run is the
    straight run, the folder records the setting, and --beside-dropout hides the lane count
    and, apart from it, the cars for its share of samples."""

    from blockplan.model.ego import BESIDE_INPUTS, LEAD_INPUTS

    lead = Recipe.build(
        "test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lane_pose=True, ego_lead=True
    )
    beside = Recipe.build(
        "test",
        CAMERAS,
        NUM_FRAMES,
        ego_tokens=2,
        ego_lane_pose=True,
        ego_lead=True,
        ego_beside=True,
    )
    train, config = _run_that_adds_inputs(
        lead, beside, dataset_dir, tmp_path, "beside_input", BESIDE_INPUTS
    )
    assert train.beside.shape == (len(train), 2, 5) and np.isfinite(train.beside[..., 0]).all()
    assert load_pretrained(tmp_path / "b" / "best").config.ego_encoder.beside

    # A folder that reads the lanes beside but not the car ahead, and a run that adds it:
    # the lead inputs go in before the lanes beside's, which stay last.
    no_lead = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_beside=True)
    both = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_lead=True, ego_beside=True)
    _new_inputs_go_before_the_last(
        no_lead, both, train, config, tmp_path / "nl", BESIDE_INPUTS, LEAD_INPUTS
    )

    every = list(range(len(train)))
    for dropout, hidden in ((0.0, 0), (1.0, len(every))):
        cfg = TrainConfig(steps=1, batch_size=2, beside_dropout=dropout)
        trainer = Trainer(beside, train, "unused", cfg, progress=False)
        lanes = trainer.inputs(train, every, np.random.default_rng(0))["beside_input"].numpy()
        assert int(np.isnan(lanes[:, 0, 0]).sum()) == hidden
        assert int(np.isnan(lanes[:, 0, 1]).sum()) == hidden
    cfg = TrainConfig(steps=1, batch_size=2, beside_dropout=0.5)
    lanes = (
        Trainer(beside, train, "unused", cfg, progress=False)
        .inputs(train, every * 8, np.random.default_rng(0))["beside_input"]
        .numpy()
    )
    lanes_hidden, cars_hidden = np.isnan(lanes[:, 0, 0]), np.isnan(lanes[:, 0, 1])
    assert (lanes_hidden != cars_hidden).any()  # the map and the tracker drop apart
    with pytest.raises(TrainError, match="beside_dropout"):
        TrainConfig(steps=1, beside_dropout=-0.1)
    train.beside[..., 0] = np.nan  # data sets written before the lanes beside were recorded
    with pytest.raises(TrainError, match="ego_beside"):
        Trainer(beside, train, "unused", TrainConfig(steps=1))


def test_an_encoder_that_reads_the_route_starts_from_one_that_reads_the_lanes_beside(
    dataset_dir, tmp_path
):
    """`--ego-route --init-from` a folder that reads the lane pose, the car ahead and the
    lanes beside: the route inputs come last at zero weight, so the model first plans as the
    folder did; training moves them, a resumed run is the straight run, the folder records
    the setting, a folder that reads the route keeps those inputs last when a run adds the
    lanes beside, and --route-dropout hides the route for its share of samples."""
    from blockplan.model.ego import BESIDE_INPUTS, ROUTE_INPUTS

    kinds = {"ego_tokens": 2, "ego_lane_pose": True, "ego_lead": True, "ego_beside": True}
    beside = Recipe.build("test", CAMERAS, NUM_FRAMES, **kinds)
    route = Recipe.build("test", CAMERAS, NUM_FRAMES, **kinds, ego_route=True)
    train, config = _run_that_adds_inputs(
        beside, route, dataset_dir, tmp_path, "route_input", ROUTE_INPUTS
    )
    assert train.route_ahead.shape == (len(train), len(ROUTE_AHEAD_M), 2)
    assert np.isfinite(train.route_ahead).all()
    assert load_pretrained(tmp_path / "b" / "best").config.ego_encoder.route

    no_beside = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_route=True)
    both = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_beside=True, ego_route=True)
    _new_inputs_go_before_the_last(
        no_beside, both, train, config, tmp_path / "nb", ROUTE_INPUTS, BESIDE_INPUTS
    )

    every = list(range(len(train)))
    for dropout, hidden in ((0.0, 0), (1.0, len(every))):
        cfg = TrainConfig(steps=1, batch_size=2, route_dropout=dropout)
        trainer = Trainer(route, train, "unused", cfg, progress=False)
        got = trainer.inputs(train, every, np.random.default_rng(0))["route_input"].numpy()
        assert int(np.isnan(got).all(axis=(1, 2)).sum()) == hidden
    with pytest.raises(TrainError, match="route_dropout"):
        TrainConfig(steps=1, route_dropout=2.0)
    train.route_ahead[:] = np.nan  # data sets written before the route was recorded
    with pytest.raises(TrainError, match="ego_route"):
        Trainer(route, train, "unused", TrainConfig(steps=1))


def test_perception_dropout_hides_the_lane_pose_the_car_ahead_and_the_lanes_beside_together(
    dataset_dir,
):
    """--perception-dropout: for its share of training samples the encoder sees none of the
    perception inputs (as on a vehicle without those modules), the route stays; validation
    (`teach=False`) keeps them all; the share is checked."""
    recipe = Recipe.build(
        "test",
        CAMERAS,
        NUM_FRAMES,
        ego_tokens=2,
        ego_lane_pose=True,
        ego_lead=True,
        ego_beside=True,
        ego_route=True,
    )
    train = load_shards(dataset_dir, "train", recipe)
    every = list(range(len(train))) * 8
    quiet = {"lane_pose_dropout": 0.0, "lead_dropout": 0.0, "beside_dropout": 0.0}
    quiet |= {"route_dropout": 0.0}
    for share in (0.0, 0.5, 1.0):
        config = TrainConfig(steps=1, batch_size=2, perception_dropout=share, **quiet)
        trainer = Trainer(recipe, train, "unused", config, progress=False)
        batch = trainer.inputs(train, every, np.random.default_rng(1))
        blind = torch.isnan(batch["lane_input"]).all(dim=1).numpy()
        assert (torch.isnan(batch["lead_input"][:, 0]).numpy() == blind).all()
        assert (torch.isnan(batch["beside_input"]).flatten(1).all(dim=1).numpy() == blind).all()
        assert not torch.isnan(batch["route_input"]).any()
        assert blind.mean() == pytest.approx(share, abs=0.15)
        kept = trainer.inputs(train, every, np.random.default_rng(1), teach=False)
        assert not torch.isnan(kept["lane_input"]).any()
    with pytest.raises(TrainError, match="perception_dropout"):
        TrainConfig(steps=1, perception_dropout=1.2)


@pytest.mark.parametrize("reads", ["cells", "map"])
def test_a_scene_token_learns_the_lead_gap_from_the_front_camera(
    reads, recipe, dataset_dir, tmp_path
):
    """--vision-keypoints K --vision-scene-token for a vehicle: the tower's scene head says the
    lead targets of the front camera's newest frame (supervised by `lead`, the planner's
    loss reaching it through the token too); a plain folder starts such a run with every
    tensor it has; the trained folder plans."""
    from blockplan.train.probe import LEAD_SCALE, lead_targets, probe_loss

    scene = Recipe.build(
        "test", CAMERAS, NUM_FRAMES, vision_keypoints=2, vision_scene=2, vision_scene_reads=reads
    )
    assert scene.model_config.tokens_per_image == recipe.model_config.tokens_per_image + 2
    train = load_shards(dataset_dir, "train", scene)
    val = load_shards(dataset_dir, "val", scene)
    config = TrainConfig(steps=3, batch_size=2, warmup_steps=1, save_every=2, seed=4, lead_weight=1)
    with pytest.raises(TrainError, match="lead-weight"):
        Trainer(scene, train, tmp_path / "x", dataclasses.replace(config, lead_weight=0))
    # a plain folder starts it: what it has carries over, the new parts start fresh
    plain = Trainer(recipe, load_shards(dataset_dir, "train", recipe), tmp_path / "p", config)
    folder = plain.model.save_pretrained(tmp_path / "m", recipe.tokenizer.to_str())
    trainer = Trainer(scene, train, tmp_path / "s", config, val_set=val, progress=False)
    trainer.init_from(folder)
    theirs, mine = plain.model.state_dict(), trainer.model.state_dict()
    for name, value in theirs.items():
        if name == "visual.cell_embed.weight":
            assert torch.equal(mine[name][: value.shape[0]], value)
        else:
            assert torch.equal(mine[name], value), name
    assert any("scene_head" in n for n in set(mine) - set(theirs))

    batch = trainer.inputs(train, [1, 2], np.random.default_rng(0))
    out = trainer.module(**batch)
    tower = trainer.module.model.visual
    with torch.no_grad():
        said = torch.stack(
            [tower.encoder.tokens_and_scene(tower.preprocess(im))[1] for im in batch["images"]]
        )[:, CAMERAS.index("front") * NUM_FRAMES + NUM_FRAMES - 1]
        target = lead_targets(batch["lead"]) / torch.tensor(LEAD_SCALE)
        torch.testing.assert_close(out["lead"].detach(), probe_loss(said, target))
    out["lead"].backward()
    grads = {n: p.grad for n, p in trainer.module.named_parameters()}
    assert grads["model.visual.encoder.scene_head.0.weight"].abs().sum() > 0
    assert grads["model.visual.encoder.keypoint_conv.weight"].abs().sum() > 0
    assert not len(trainer.module.probes)  # the head is the model's, not a training probe

    trainer.module.zero_grad(set_to_none=True)
    trainer.fit()
    model = load_pretrained(tmp_path / "s" / "best")
    assert model.config.vision.scene == 2 and model.config.vision.keypoints == 2
    assert model.config.vision.scene_reads == reads


def test_scene_teacher_forcing_tells_the_token_the_true_gap_and_only_in_training(
    recipe, dataset_dir
):
    """--scene-teacher-share p: for a share p of training samples with a known gap, the
    front camera's newest scene token says the true lead targets instead of its head's; the
    head's own loss is unchanged (it still learns from its own numbers), validation never
    forces, and a model without a scene token refuses the option."""
    from blockplan.train.probe import LEAD_SCALE, lead_targets

    scene = Recipe.build("test", CAMERAS, NUM_FRAMES, vision_scene=2, vision_scene_reads="map")
    train = load_shards(dataset_dir, "train", scene)
    known = [i for i in range(len(train)) if np.isfinite(train.lead[i, 0])][:2]
    assert len(known) == 2, "the fixture data set has cars ahead"
    base = TrainConfig(steps=1, batch_size=2, seed=3, lead_weight=1)
    with pytest.raises(TrainError, match="scene token"):
        Trainer(
            recipe,
            load_shards(dataset_dir, "train", recipe),
            "unused",
            dataclasses.replace(base, lead_weight=0, scene_teacher_share=0.5),
        )
    with pytest.raises(TrainError, match="scene_teacher_share"):
        TrainConfig(steps=1, scene_teacher_share=1.5)

    plain = Trainer(scene, train, "unused", base, progress=False)
    forced = Trainer(scene, train, "unused", dataclasses.replace(base, scene_teacher_share=1.0))
    forced.module.load_state_dict(plain.module.state_dict())
    rng = lambda: np.random.default_rng(7)  # noqa: E731
    batch = forced.inputs(train, known, rng())
    assert batch["lead_told"].all()
    assert "lead_told" not in forced.inputs(train, known, rng(), teach=False)
    same = plain.inputs(train, known, rng())
    assert "lead_told" not in same
    for key, value in same.items():  # the option draws last: every other input is as before
        assert torch.equal(value, batch[key]), key

    # what the front camera's newest scene token says: the truth, in the head's units
    front = CAMERAS.index("front") * NUM_FRAMES + NUM_FRAMES - 1
    told = forced.module.told_scene(batch["lead"], batch["lead_told"])  # (B, K*T, 2)
    truth = lead_targets(batch["lead"]) / torch.tensor(LEAD_SCALE)
    torch.testing.assert_close(told[:, front], truth)
    mask = torch.ones_like(told[..., 0], dtype=torch.bool)
    mask[:, front] = False
    assert torch.isnan(told[mask]).all()
    tower = forced.module.model.visual
    with torch.no_grad():
        images = tower.preprocess(batch["images"][0])
        own_tokens, own = tower.encoder.tokens_and_scene(images)
        tokens, numbers = tower.encoder.tokens_and_scene(images, told[0])
    torch.testing.assert_close(numbers, own)  # the head's numbers, for its loss
    torch.testing.assert_close(tokens[front, -1], tower.encoder.scene_embed(truth[0]))
    others = [i for i in range(len(tokens)) if i != front]
    torch.testing.assert_close(tokens[others], own_tokens[others])

    # the decoder sees it: one prompt row per sample (that token) differs, nothing else
    m = forced.module
    with torch.no_grad():
        args = (batch["prompt_ids"], batch["images"], batch.get("ego_history"), None, None)
        seen = m.prompt_embeds(*args, [], told) - m.prompt_embeds(*args, [], None)
        out_forced, out_plain = m(**batch), plain.module(**same)
    assert (seen.abs().amax(dim=-1) > 0).sum(dim=1).tolist() == [1] * len(known)
    torch.testing.assert_close(out_forced["lead"], out_plain["lead"])


def test_steady_history_shows_the_t0_speed_held_for_a_share_of_training_samples(
    recipe, dataset_dir
):
    """--steady-history-share p: an ego-encoder model sees, for a share p of training samples,
    the ego history with the t0 speed held (positions at that speed, no longitudinal
    acceleration; the lateral columns as recorded); validation sees the true history."""
    from blockplan.train.trainer import steady_history

    history = torch.tensor(
        [
            [
                [-19.0, 0.3, 9.0, 0.1, -1.0, 0.2],
                [-9.5, 0.1, 9.5, 0.0, -1.0, 0.1],
                [0.0, 0.0, 10.0, 0.05, -2.0, 0.0],
            ]
        ]
    )
    held = steady_history(history, 1.0)
    torch.testing.assert_close(held[0, :, 0], torch.tensor([-20.0, -10.0, 0.0]))
    torch.testing.assert_close(held[0, :, 2], torch.full((3,), 10.0))
    torch.testing.assert_close(held[0, :, 4], torch.zeros(3))
    torch.testing.assert_close(held[..., [1, 3, 5]], history[..., [1, 3, 5]])

    with pytest.raises(TrainError, match="ego-tokens"):
        Trainer(
            recipe,
            load_shards(dataset_dir, "train", recipe),
            "unused",
            TrainConfig(steps=1, steady_history_share=0.5),
        )
    with pytest.raises(TrainError, match="steady_history_share"):
        TrainConfig(steps=1, steady_history_share=-0.1)
    ego = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2)
    train = load_shards(dataset_dir, "train", ego)
    every = list(range(len(train)))
    true = torch.from_numpy(train.ego_history[every].astype(np.float32))
    period = ego.schema.history_period_s
    for share, steady in ((0.0, 0), (1.0, len(every))):
        config = TrainConfig(steps=1, batch_size=2, steady_history_share=share)
        trainer = Trainer(ego, train, "unused", config, progress=False)
        got = trainer.inputs(train, every, np.random.default_rng(0))["ego_history"]
        changed = (got != true).flatten(1).any(dim=1)
        assert int(changed.sum()) <= steady
        if share:
            torch.testing.assert_close(got, steady_history(true, period))
        shown = trainer.inputs(train, every, np.random.default_rng(0), teach=False)
        assert torch.equal(shown["ego_history"], true)


def test_an_ego_encoder_that_reads_the_scene_token_starts_silent_and_learns(dataset_dir, tmp_path):
    """--ego-reads-scene: the ego encoder also reads the front camera's newest scene token
    (the decoder reads the encoder's slots for every plan). Config round-trip and
    refusals; the slots change with that token and with no other visual token; a folder
    whose encoder does not read it starts the run with the new inputs at zero weight (the
    same loss), training moves them, and a teacher-forced token reaches the encoder."""
    from blockplan.model.config import ModelConfigError
    from blockplan.model.ego import EgoEncoderConfig
    from blockplan.model.planner_model import PlannerModel

    kw = dict(ego_tokens=2, vision_scene=2, vision_scene_reads="map")
    plain = Recipe.build("test", CAMERAS, NUM_FRAMES, **kw)
    reads = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_scene=True, **kw)
    assert reads.model_config.ego_encoder.to_dict()["scene"] is True
    assert "scene" not in plain.model_config.ego_encoder.to_dict()
    assert EgoEncoderConfig.from_dict(reads.model_config.ego_encoder.to_dict()).scene
    with pytest.raises(ModelConfigError, match="scene"):
        Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2, ego_scene=True)

    # serving's embed_prompt: the slots read the front camera's newest scene token only
    model = PlannerModel(reads.model_config).eval()
    torch.nn.init.normal_(model.ego_encoder.net[0].weight, std=0.5)
    template = reads.template
    T, W = NUM_FRAMES, model.decoder_config.hidden_size
    G = reads.model_config.tokens_per_image
    ids = torch.tensor(np.asarray(template.token_ids), dtype=torch.long)
    history = torch.zeros(reads.schema.num_history, 6)
    visual = torch.randn(len(CAMERAS) * T, G, W)
    front = CAMERAS.index("front") * T + T - 1
    start, end = template.ego_span

    def slots(v):
        with torch.no_grad():
            out = model.embed_prompt(ids, template.image_spans, v, template.ego_span, history)
        return out[0, start:end]

    base = slots(visual)
    for index, token, moves in ((front, -1, True), (front, 0, False), (front - 1, -1, False)):
        other = visual.clone()
        other[index, token] += 1.0
        assert (not torch.equal(slots(other), base)) == moves, (index, token)

    # init_from a folder whose encoder does not read it: silent at first, then trained
    train = load_shards(dataset_dir, "train", reads)
    base_config = TrainConfig(steps=1, batch_size=2, seed=5, lead_weight=1)
    source = Trainer(plain, train, tmp_path / "s", base_config)
    folder = source.model.save_pretrained(tmp_path / "m", plain.tokenizer.to_str())
    config = TrainConfig(
        steps=3,
        batch_size=2,
        warmup_steps=1,
        save_every=3,
        seed=3,
        lead_weight=1,
        scene_teacher_share=1.0,
    )
    target = Trainer(reads, train, tmp_path / "t", config, progress=False)
    target.init_from(folder)
    weight = target.model.state_dict()["ego_encoder.net.0.weight"]
    assert weight.shape[1] == source.model.state_dict()["ego_encoder.net.0.weight"].shape[1] + W
    assert torch.count_nonzero(weight[:, -W:]) == 0
    batch = target.inputs(train, [0, 1], np.random.default_rng(0), teach=False)
    with torch.no_grad():
        torch.testing.assert_close(target.module(**batch)["loss"], source.module(**batch)["loss"])
    target.fit()
    weight = target.model.state_dict()["ego_encoder.net.0.weight"]
    assert torch.count_nonzero(weight[:, -W:]) > 0
    assert load_pretrained(tmp_path / "t" / "best").config.ego_encoder.scene


def test_init_from_a_folder_of_another_architecture_names_what_differs(
    recipe, dataset_dir, tmp_path
):
    """A folder the run cannot start from is refused with the config keys that differ, so
    the user sees which training flags to add (e.g. the shipped model's scene token)."""
    kw = dict(ego_tokens=2, vision_scene=2, vision_scene_reads="map", ego_scene=True)
    scene = Recipe.build("test", CAMERAS, NUM_FRAMES, **kw)
    plain = Recipe.build("test", CAMERAS, NUM_FRAMES, ego_tokens=2)
    train = load_shards(dataset_dir, "train", scene)
    source = Trainer(scene, train, tmp_path / "s", TrainConfig(steps=1, lead_weight=1))
    folder = source.model.save_pretrained(tmp_path / "m", scene.tokenizer.to_str())
    target = Trainer(
        plain, load_shards(dataset_dir, "train", plain), tmp_path / "t", TrainConfig(steps=1)
    )
    with pytest.raises(TrainError, match=r"ego_encoder\.scene, .*vision_config\.scene"):
        target.init_from(folder)
