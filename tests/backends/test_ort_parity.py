"""ONNX Runtime vs torch: logits within 1e-3 and identical greedy plans (docs/DESIGN.md §8). The
shipped model folders are covered by tests/test_shipped_models.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.config import MODEL_STRATEGIES, PlannerConfig
from blockplan.decoding.kv_cache import KVCache
from blockplan.model.masks import draft_mask
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from tests.backends.conftest import with_backend
from tests.optional import importorskip

importorskip("onnxruntime")
importorskip("onnx")


def pair(reference: Planner) -> Planner:
    """The same weights on the onnxruntime backend (exported in-process)."""
    config = with_backend(reference.config, "onnxruntime", reference.cache.max_batch)
    return Planner(reference.model, reference.tokenizer, config, reference.schema)


@torch.no_grad()
def max_logit_gap(reference: Planner, ort_planner: Planner, seed: int) -> float:
    """Largest |Δlogit| over a prompt prefill and a bidirectional draft window after it."""
    obs = synthetic_observation(reference.config, seed)
    outputs = []
    for planner in (reference, ort_planner):
        images = planner.images(obs)
        visual = planner.runner.encode_images(images)
        layout = planner.render(obs)
        ids = torch.tensor(np.asarray(layout.token_ids))
        embeds = planner.model.embed_prompt(ids, layout.image_spans, visual, **layout.ego_inputs())
        cache = KVCache.for_model(planner.model.config.decoder, planner.cache.max_len)
        prefill = planner.runner(inputs_embeds=embeds, mask=planner.prompt_mask, cache=cache)
        cache.commit(embeds.shape[1])
        window = torch.tensor(planner.scaffold.token_ids[:20])[None]
        draft = planner.runner(window, mask=draft_mask(20, cache.length), cache=cache)
        outputs.append((prefill, draft))
    (a0, a1), (b0, b1) = outputs
    return max(float((a0 - b0).abs().max()), float((a1 - b1).abs().max()))


@pytest.fixture(scope="module")
def test_pair():
    reference = Planner.random_init("test", with_backend(PlannerConfig(), "torch"), seed=11)
    return reference, pair(reference)


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_matches_torch_on_a_small_model(test_pair, strategy):
    reference, ort_planner = test_pair
    assert ort_planner.runner.name == "onnxruntime"
    obs = synthetic_observation(reference.config, 2)
    want = reference.decode(obs, strategy)
    got = ort_planner.decode(obs, strategy)
    np.testing.assert_array_equal(got.result.tokens, want.result.tokens)
    np.testing.assert_allclose(got.plan.rollouts, want.plan.rollouts)


def test_small_model_logits_within_1e3(test_pair):
    assert max_logit_gap(*test_pair, seed=4) <= 1e-3


@pytest.mark.slow
def test_tiny_model_logits_and_greedy_plans_match_torch():
    reference = Planner.random_init("tiny", with_backend(PlannerConfig(), "torch", 1), seed=0)
    ort_planner = pair(reference)
    assert max_logit_gap(reference, ort_planner, seed=0) <= 1e-3
    assert_same_greedy_plans(reference, ort_planner, seed=1)


def assert_same_greedy_plans(reference: Planner, ort_planner: Planner, seed: int) -> None:
    obs = synthetic_observation(reference.config, seed)
    for strategy in ("ar", "scaffold_spec"):
        want = reference.decode(obs, strategy).result.tokens
        np.testing.assert_array_equal(ort_planner.decode(obs, strategy).result.tokens, want)


@pytest.mark.parametrize("reads", ["cells", "map"])
def test_a_driving_model_with_keypoints_and_a_scene_token_matches_torch(reads):
    """The lead-gap tower (docs/ALGORITHMS.md §3.5) exports with the rest: same logits, same
    plans."""
    import dataclasses

    from blockplan.planner.parts import random_parts

    def scene(mc):
        vision = dataclasses.replace(mc.vision, keypoints=2, scene=2, scene_reads=reads)
        return dataclasses.replace(mc, vision=vision)

    p = random_parts("test", with_backend(PlannerConfig(), "torch"), 3, adjust=scene)
    reference = Planner(p.model, p.tokenizer, p.config, p.schema)
    assert reference.model.config.vision.scene_reads == reads
    ort_planner = pair(reference)
    assert max_logit_gap(reference, ort_planner, seed=5) <= 1e-3
    assert_same_greedy_plans(reference, ort_planner, seed=3)


def test_an_ego_encoder_that_reads_the_scene_token_matches_torch():
    """--ego-reads-scene (docs/ALGORITHMS.md §3.5): the encoder reads the front camera's
    scene token from the visual tokens the backend's vision graph computed, so onnxruntime
    plans as torch does (that the slots depend on the token: tests/train/test_trainer.py)."""
    from blockplan.model.planner_model import PlannerModel
    from blockplan.train.recipe import Recipe

    config = with_backend(PlannerConfig(), "torch")
    recipe = Recipe.build(
        "test",
        tuple(config.camera_names),
        config.frame_window.num_frames,
        ego_tokens=2,
        vision_scene=2,
        vision_scene_reads="map",
        ego_scene=True,
    )
    torch.manual_seed(3)
    model = PlannerModel(recipe.model_config).eval()
    with torch.no_grad():  # the scene token's inputs are not silent (a trained encoder's)
        torch.nn.init.normal_(model.ego_encoder.net[0].weight, std=0.2)
    reference = Planner(model, recipe.tokenizer, config, recipe.schema)
    ort_planner = pair(reference)
    assert max_logit_gap(reference, ort_planner, seed=5) <= 1e-3
    assert_same_greedy_plans(reference, ort_planner, seed=3)
