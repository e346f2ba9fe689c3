import json

import pytest

from blockplan.model.weights import load_pretrained
from blockplan.train.distributed import parameter_digest
from blockplan.train.examples import load_shards
from blockplan.train.trainer import TrainConfig, Trainer, TrainError


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


def test_resume_continues_exactly(recipe, dataset_dir, tmp_path):
    train = load_shards(dataset_dir, "train", recipe)
    val = load_shards(dataset_dir, "val", recipe)
    config = TrainConfig(steps=4, batch_size=2, warmup_steps=1, save_every=3, log_every=1,
                         val_samples=2, seed=3)  # fmt: skip

    straight = Trainer(recipe, train, tmp_path / "a", config, val_set=val, progress=False)
    final = straight.fit()
    assert final["step"] == 4 and len(final["param_digests"]) == 1

    interrupted = Trainer(recipe, train, tmp_path / "b", config, val_set=val, progress=False)
    interrupted.fit(until=2)
    resumed = Trainer(recipe, train, tmp_path / "b", config, val_set=val, progress=False)
    assert resumed.resume() and resumed.step == 2
    resumed.fit()
    assert parameter_digest(resumed.module) == parameter_digest(straight.module)
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert {r["event"] for r in lines} == {"train", "checkpoint", "done"}
    model = load_pretrained(tmp_path / "b" / "best")  # the best folder is a loadable model
    assert model.num_parameters() == resumed.model.num_parameters()


def test_init_from_copies_a_folders_weights(recipe, dataset_dir, tmp_path):
    train = load_shards(dataset_dir, "train", recipe)
    config = TrainConfig(steps=1, batch_size=2, seed=5)
    source = Trainer(recipe, train, tmp_path / "a", config, progress=False)
    folder = source.model.save_pretrained(tmp_path / "m", recipe.tokenizer.to_str())
    target = Trainer(recipe, train, tmp_path / "b", TrainConfig(steps=1, batch_size=2, seed=6),
                     progress=False)  # fmt: skip
    assert parameter_digest(target.module) != parameter_digest(source.module)
    target.init_from(folder)
    assert parameter_digest(target.module) == parameter_digest(source.module)
