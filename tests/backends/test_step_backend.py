"""StepBackend's bookkeeping (padding, chunking, K/V copies) on the export graphs' own torch
forwards: every strategy gives the torch model's tokens, and the cache ends up the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.backends import StepBackend, TorchBackend, TorchGraphExecutor, create_backend
from blockplan.backends.factory import BackendSetupError
from blockplan.config import MODEL_STRATEGIES, PlannerConfig
from blockplan.decoding.kv_cache import KVCache
from blockplan.model.masks import draft_mask
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from tests.backends.conftest import with_backend


@pytest.fixture(scope="module")
def planners():
    config = with_backend(PlannerConfig(), "torch")
    reference = Planner.random_init("test", config, seed=3)
    L = reference.cache.max_len
    executor = TorchGraphExecutor(reference.model, (4, 16, 64, 256), L)
    graph = Planner(
        reference.model,
        reference.tokenizer,
        config,
        reference.schema,
        backend=StepBackend("torch-graph", reference.model, executor),
    )
    return reference, graph


@pytest.fixture(scope="module")
def dynamic_planner(planners):
    """The same model through StepBackend's dynamic path (one exact-shape call per forward,
    what ONNX Runtime runs with `decoder_dynamic.onnx`)."""
    reference, _ = planners
    executor = TorchGraphExecutor(reference.model, (), reference.cache.max_len, dynamic=True)
    backend = StepBackend("torch-graph-dynamic", reference.model, executor)
    return Planner(
        reference.model, reference.tokenizer, reference.config, reference.schema, backend=backend
    )


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_decodes_the_same_tokens(planners, dynamic_planner, strategy):
    reference, graph = planners
    obs = synthetic_observation(reference.config, 5)
    want = reference.decode(obs, strategy).result
    for runner in (graph, dynamic_planner):
        got = runner.decode(obs, strategy).result
        np.testing.assert_array_equal(got.tokens, want.tokens)
        assert got.num_forwards == want.num_forwards


def test_a_dynamic_forward_is_one_call_and_writes_the_same_pending_cache(planners, dynamic_planner):
    reference, _ = planners
    c = reference.model.config.decoder
    torch.manual_seed(1)
    executor = dynamic_planner.runner.executor
    calls = []
    step = executor.step_cached
    executor.step_cached = lambda *args: calls.append(args[0].shape) or step(*args)
    prompt = torch.randn(1, 300, c.hidden_size)
    window, rows = torch.randint(0, c.vocab_size, (1, 7)), torch.tensor([0, 3, 6])
    try:
        caches, logits = [], []
        for runner in (reference.runner, dynamic_planner.runner):
            cache = KVCache.for_model(c, reference.cache.max_len)
            out = [runner(inputs_embeds=prompt, cache=cache)]
            cache.commit(300)
            out.append(runner(window, mask=draft_mask(7, 300), cache=cache, logit_rows=rows))
            logits.append(out)
            caches.append(cache)
    finally:
        executor.step_cached = step
    assert calls == [(1, 300, c.hidden_size), (1, 7, c.hidden_size)]  # no chunks, no padding
    for got, want in zip(logits[1], logits[0], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert logits[1][1].shape[1] == 3
    torch.testing.assert_close(caches[1].kv[..., :307, :], caches[0].kv[..., :307, :])
    torch.testing.assert_close(caches[1].raw_keys[..., :307, :], caches[0].raw_keys[..., :307, :])


def test_chunked_forward_writes_the_same_pending_cache(planners):
    reference, graph = planners
    c = reference.model.config.decoder
    torch.manual_seed(0)
    x = torch.randn(1, 300, c.hidden_size)  # > the widest window: two causal chunks
    caches = []
    logits = []
    for runner in (reference.runner, graph.runner):
        cache = KVCache.for_model(c, reference.cache.max_len)
        logits.append(runner(inputs_embeds=x, cache=cache, num_logits=3))
        caches.append(cache)
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-5)
    assert caches[1].num_pending == 300
    torch.testing.assert_close(caches[1].kv[..., :300, :], caches[0].kv[..., :300, :])
    torch.testing.assert_close(caches[1].raw_keys[..., :300, :], caches[0].raw_keys[..., :300, :])


def test_chunks_never_cut_a_bidirectional_span(planners):
    _, graph = planners
    mask = torch.ones(1, 6, 6, dtype=torch.bool).tril()
    mask[0, 1:4, 1:4] = True  # tokens 1..3 see each other
    executor = TorchGraphExecutor(graph.model, (3,), graph.cache.max_len)
    backend = StepBackend("w3", graph.model, executor)
    assert backend.chunk_ends(mask, 0) == [1, 4, 6]
    assert backend.chunk_ends(mask[:, :, :], 0) == [1, 4, 6]


def test_a_window_wider_than_every_graph_is_an_error(planners):
    _, graph = planners
    c = graph.model.config.decoder
    cache = KVCache.for_model(c, graph.cache.max_len)
    with pytest.raises(ValueError, match="widest exported window"):
        graph.runner(
            inputs_embeds=torch.zeros(1, 260, c.hidden_size), mask=draft_mask(260), cache=cache
        )


def test_create_backend_names():
    model = Planner.random_init("test", with_backend(PlannerConfig(), "torch")).model
    assert isinstance(create_backend("torch", model, 8, 1), TorchBackend)
    with pytest.raises(BackendSetupError, match="model.backend='jax'"):
        create_backend("jax", model, 8, 1)
