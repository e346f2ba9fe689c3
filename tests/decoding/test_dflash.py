"""dflash: a DFlash drafter's proposals verified by the target (decoding/dflash.py).

The tokens equal AR greedy's on every plan, with a random-init drafter (the worst case:
almost nothing accepted) and with a trained one; the drafter folder is verified on load;
the hidden-state taps leave the decoder's logits unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from blockplan.config import PlannerConfig
from blockplan.decoding.decode import DecodeOptions, decode
from blockplan.model.drafter import (
    Drafter,
    default_target_layers,
    load_drafter,
    random_drafter,
    save_drafter,
)
from blockplan.model.masks import causal_mask
from blockplan.model.weights import WeightsError
from blockplan.planner.parts import PlannerSetupError
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from blockplan.train.drafter import DrafterOptions, train_drafter
from tests.optional import importorskip

SIZES = {"hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "context": 4}


def test_default_target_layers_read_a_third_two_thirds_and_the_last():
    assert default_target_layers(1) == (0,)
    assert default_target_layers(2) == (0, 1)
    assert default_target_layers(4) == (0, 2, 3)
    assert default_target_layers(36) == (11, 23, 35)


@pytest.mark.parametrize("fast", [True, False])
def test_the_hidden_taps_leave_the_logits_alone(decoder_factory, fast):
    model = decoder_factory(0)
    model.fast_path = fast
    ids = torch.randint(3, 16, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(ids)
        logits, taps = model(ids, hidden_layers=(0, 1))
        _, hidden = model(ids, return_hidden=True)
    assert torch.equal(plain, logits)
    assert taps.shape == (1, 9, 2 * model.config.hidden_size)
    # the last layer's residual stream, normed, is the final hidden state
    assert torch.allclose(model.model.norm(taps[..., model.config.hidden_size :]), hidden)


@pytest.mark.parametrize("block_size", [1, 4, 7, 32])
def test_dflash_with_a_random_drafter_decodes_ar_greedy(
    decoder_factory, scaffold_factory, block_size
):
    for seed in range(2):
        model = decoder_factory(seed)
        scaffold = scaffold_factory(seed, block_size)
        ids = torch.randint(3, 16, (1, 9), generator=torch.Generator().manual_seed(seed))
        embeds = model.embed(ids).detach()
        drafter = random_drafter(model, seed=seed, **SIZES)
        ar = decode(model, embeds, causal_mask(9), scaffold, DecodeOptions("ar"))
        for window in ("adaptive", "block"):
            options = DecodeOptions("dflash", spec_window=window)
            mine = decode(model, embeds, causal_mask(9), scaffold, options, drafter=drafter)
            assert np.array_equal(mine.tokens, ar.tokens), (seed, window)
            assert mine.num_draft_forwards > 0
        # a hint (the previous answer) composes: proposed first, the same tokens
        hint = ar.tokens[0].copy()
        hint[scaffold.is_editable] = 3
        hinted = decode(
            model, embeds, causal_mask(9), scaffold, options, drafter=drafter, draft_hint=hint
        )
        assert np.array_equal(hinted.tokens, ar.tokens)


def test_dflash_without_a_drafter_is_an_error(decoder_factory, scaffold_factory):
    model = decoder_factory(0)
    embeds = model.embed(torch.tensor([[3, 4, 5]])).detach()
    with pytest.raises(ValueError, match="dflash.*drafter"):
        decode(model, embeds, causal_mask(3), scaffold_factory(0, 4), DecodeOptions("dflash"))


def _torch_planner(preset: str = "test") -> Planner:
    config = PlannerConfig().with_params({"model.backend": "torch"})
    return Planner.random_init(preset, config)


@pytest.mark.slow
def test_a_trained_drafter_decodes_ar_greedy_and_accepts_more_than_a_random_one(tmp_path):
    planner = _torch_planner()
    observations = [synthetic_observation(planner.config, 100 + i) for i in range(6)]
    options = DrafterOptions(steps=60, batch_size=16, context=4, hidden_size=32,
                             intermediate_size=64, val_fraction=0.0)  # fmt: skip
    drafter, report = train_drafter(planner, observations, options, say=lambda _m: None)
    assert report["answers"] == 6 and report["vocab"] >= 1
    save_drafter(drafter, tmp_path / "drafter")
    loaded = load_drafter(tmp_path / "drafter", planner.model.decoder)
    trained = random = 0
    worst = random_drafter(planner.model.decoder, seed=0, hidden_size=32, intermediate_size=64)
    for obs in [*observations[:3], synthetic_observation(planner.config, 7)]:
        planner.previous_answer = None
        ar = planner.decode(obs, "ar").result
        for which, d in (("trained", loaded), ("random", worst)):
            planner.drafter = d
            planner.previous_answer = None
            mine = planner.decode(obs, "dflash").result
            assert np.array_equal(mine.tokens, ar.tokens), which
            if which == "trained":
                trained += mine.num_forwards
            else:
                random += mine.num_forwards
    assert trained < random  # on its own training inputs it must have learned something


def test_the_shipped_model_plans_ar_greedy_with_a_random_drafter():
    config = PlannerConfig().with_params({"model.backend": "torch"})
    planner = Planner.from_folder("models/blockplan-tiny", config)
    planner.drafter = random_drafter(planner.model.decoder, seed=1, **SIZES)
    obs = synthetic_observation(planner.config, 3, schema=planner.schema)
    planner.previous_answer = None
    spec = planner.decode(obs, "scaffold_spec").result
    planner.previous_answer = None
    mine = planner.decode(obs, "dflash").result
    assert np.array_equal(mine.tokens, spec.tokens)
    planner.parse(mine.tokens[0])


def test_the_drafter_folder_round_trips_and_is_verified(tmp_path, decoder_factory):
    model = decoder_factory(0, dtype=torch.float32)
    drafter = random_drafter(model, seed=0, vocab=(3, 5, 7), **SIZES)
    folder = save_drafter(drafter, tmp_path / "d")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "manifest.json",
        "model.safetensors",
    ]
    # a random drafter records no training target: it is made for `model` all the same
    loaded = load_drafter(folder, model)
    features = torch.randn(1, 4, drafter.config.feature_size)
    tokens = torch.tensor([[3, 4, 5, 6]])
    unknown = torch.tensor([[False, True, True, False]])
    with torch.no_grad():
        assert torch.equal(drafter(features, tokens, unknown), loaded(features, tokens, unknown))
    other = decoder_factory(1, dtype=torch.float32)
    with pytest.raises(WeightsError, match="target_sha256"):
        load_drafter(folder, other)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "context": 5}))
    with pytest.raises(WeightsError, match="sha256"):
        load_drafter(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(WeightsError, match="manifest"):
        load_drafter(folder)


def test_the_planner_refuses_dflash_without_a_drafter(tmp_path):
    with pytest.raises(PlannerSetupError, match="decoding.drafter"):
        Planner.random_init("test", PlannerConfig().with_params({"decoding.strategy": "dflash"}))
    bad = PlannerConfig().with_params({"decoding.drafter": str(tmp_path / "missing")})
    with pytest.raises(PlannerSetupError, match="decoding.drafter"):
        Planner.random_init("test", bad)


@pytest.mark.slow
def test_the_planner_refuses_dflash_on_another_backend(tmp_path):
    importorskip("onnxruntime")
    planner = _torch_planner()
    folder = save_drafter(random_drafter(planner.model.decoder, **SIZES), tmp_path / "d")
    config = PlannerConfig().with_params(
        {"model.backend": "onnxruntime", "decoding.drafter": str(folder)}
    )
    other = Planner.random_init("test", config)
    assert isinstance(other.drafter, Drafter)
    with pytest.raises(PlannerSetupError, match="eager torch"):
        other.decode(synthetic_observation(other.config, 0), "dflash")


@pytest.mark.parametrize("preset", ["test", "qwen2.5-vl-test"])
def test_the_drafter_reads_the_features_a_full_recompute_gives(monkeypatch, preset):
    """The context rows kept while decoding equal those of one teacher-forced pass over the
    answer (what the drafter is trained on), also where answer positions are not cache
    slots (multimodal RoPE: the answer starts at a rotary position below the prompt length)."""
    import importlib

    from blockplan.planner.qwen import fastddrive_config
    from blockplan.planner.synthetic import synthetic_input
    from blockplan.train.drafter import target_features

    decode_module = importlib.import_module("blockplan.decoding.decode")
    stores = []

    class Recording(decode_module.FeatureStore):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stores.append(self)

    monkeypatch.setattr(decode_module, "FeatureStore", Recording)
    config = PlannerConfig().with_params({"model.backend": "torch"})
    if preset.startswith("qwen"):
        config = fastddrive_config(config)
    planner = Planner.random_init(preset, config)
    planner.drafter = random_drafter(planner.model.decoder, **SIZES)
    obs = synthetic_input(planner.config, 0, planner.schema)
    result = planner.decode(obs, "dflash").result
    store = stores[-1]
    expected = target_features(planner, obs, result.tokens[0], store.layers, store.context)
    kept = torch.from_numpy(store.valid)
    assert kept[: store.context + len(planner.scaffold) // 2].all()
    assert torch.allclose(store.rows[0][kept], expected[kept], atol=1e-4)


@pytest.mark.parametrize("preset", ["test", "qwen2.5-vl-test"])
def test_every_drafter_input_at_serve_time_is_the_training_batch_of_its_window(monkeypatch, preset):
    """Each drafter forward while decoding gets exactly what training feeds it for the same
    answer and window [w, e) (`train.drafter._batch` over a teacher-forced pass): the C
    feature rows before w, the window's tokens with the known one at w (the correction or
    bonus of the last verify) and the structural slots, mask slots at the editable ones,
    and the same key rows."""
    from blockplan.decoding.dflash import FeatureStore
    from blockplan.planner.qwen import fastddrive_config
    from blockplan.planner.synthetic import synthetic_input
    from blockplan.train.drafter import Distilled, _batch, target_features

    config = PlannerConfig().with_params({"model.backend": "torch"})
    if preset.startswith("qwen"):
        config = fastddrive_config(config)
    planner = Planner.random_init(preset, config)
    drafter = random_drafter(planner.model.decoder, **SIZES)
    planner.drafter = drafter
    starts, calls = [], []
    window_context = FeatureStore.window_context

    def recording_context(self, w):
        starts.append(w)
        return window_context(self, w)

    def recording_forward(features, tokens, unknown, valid=None):
        calls.append((features.clone(), tokens.clone(), unknown.clone(), valid))
        return Drafter.forward(drafter, features, tokens, unknown, valid)

    monkeypatch.setattr(FeatureStore, "window_context", recording_context)
    monkeypatch.setattr(drafter, "forward", recording_forward)
    obs = synthetic_input(planner.config, 0, planner.schema)
    result = planner.decode(obs, "dflash").result
    assert len(calls) == len(starts) == result.num_draft_forwards > 3
    answer = result.tokens[0]
    C = drafter.config.context
    rows = target_features(planner, obs, answer, drafter.config.target_layers, C)
    valid = np.ones(rows.shape[0], dtype=bool)
    valid[: max(C - planner.prompt_len, 0)] = False
    data = Distilled(answer[None], rows[None], valid[None])
    editable = np.asarray(planner.scaffold.is_editable)
    everything = np.arange(planner.model.decoder.config.vocab_size)
    for w, (features, tokens, unknown, keys) in zip(starts, calls, strict=True):
        W = tokens.shape[1]
        item = np.array([[0, w, w + W]])
        f, t, u, k, _ = _batch(data, item, editable, everything, W, C)
        assert torch.equal(unknown[0], u[0]), w
        known = ~u[0]
        assert torch.equal(tokens[0][known], t[0][known]), w  # the token at w included
        assert bool(known[0]) and int(tokens[0, 0]) == int(answer[w])
        served_keys = torch.ones(C + W, dtype=torch.bool) if keys is None else keys[0].cpu()
        assert torch.equal(served_keys, k[0]), w
        assert torch.allclose(features[0][k[0, :C]], f[0][k[0, :C]], atol=1e-4), w


def test_a_drafter_folder_resolves_like_the_model_folder(tmp_path, monkeypatch):
    """decoding.drafter: as given (absolute, or relative to the current folder), else under
    the package root, as model.dir is."""
    from blockplan.config import package_root
    from blockplan.planner.planner import drafter_folder

    monkeypatch.chdir(tmp_path)
    assert drafter_folder("models/blockplan-tiny") == package_root() / "models/blockplan-tiny"
    (tmp_path / "models" / "blockplan-tiny").mkdir(parents=True)  # one here wins
    assert drafter_folder("models/blockplan-tiny") == Path("models/blockplan-tiny")
    assert drafter_folder("nowhere") == Path("nowhere")  # the loader names what is missing
    assert drafter_folder(str(tmp_path)) == tmp_path
