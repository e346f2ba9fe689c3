"""The decoder's fast inference forward (model/fast.py) against its module-by-module
reference: the same logits, hidden states and cache contents, bit for bit."""

from __future__ import annotations

import pytest
import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.model.config import DecoderConfig
from blockplan.model.decoder import Decoder
from blockplan.model.masks import causal_mask, draft_mask

CONFIGS = {
    "gqa": DecoderConfig(
        vocab_size=61,
        hidden_size=48,
        intermediate_size=88,  # not a multiple of the SIMD width: silu's scalar tail
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    ),
    "tied_mha": DecoderConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "mrope": DecoderConfig(
        vocab_size=40,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        mrope_section=(2, 3, 3),
    ),
}


def _decoder(name: str, dtype: torch.dtype, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    model = Decoder(CONFIGS[name]).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def _both(model: Decoder, fn):
    """fn() on the fast path and on the reference path."""
    try:
        model.fast_path = True
        fast = fn()
        model.fast_path = False
        ref = fn()
    finally:
        del model.fast_path  # back to the class default
    return fast, ref


def _assert_identical(a, b) -> None:
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _assert_identical(x, y)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b), f"max |diff| {(a - b).abs().max().item()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["gqa", "tied_mha"])
def test_no_cache_forward_is_bitwise_the_reference(name, dtype):
    model = _decoder(name, dtype)
    for S in (1, 7, 33):
        ids = torch.randint(0, model.config.vocab_size, (2, S))
        with torch.no_grad():
            for kwargs in ({}, {"num_logits": 1}, {"return_hidden": True}):
                fast, ref = _both(model, lambda ids=ids, kwargs=kwargs: model(ids, **kwargs))
                _assert_identical(fast, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["gqa", "tied_mha"])
def test_cached_windows_are_bitwise_the_reference(name, dtype):
    """Prefill, then draft (bidirectional) and verify (causal) windows of many widths, as
    the block loop runs them: logits and every cache buffer match."""
    model = _decoder(name, dtype, seed=1)
    V = model.config.vocab_size

    def run():
        gen = torch.Generator().manual_seed(5)
        cache = KVCache.for_model(model.config, 400, 2, dtype)
        out = [model(torch.randint(0, V, (1, 37), generator=gen), cache=cache, num_logits=1)]
        cache.commit(37)
        cache.fork(2)
        for W in (1, 2, 5, 16, 17, 31, 64, 85):
            ids = torch.randint(0, V, (2, W), generator=gen)
            pos = torch.arange(cache.length + 3, cache.length + 3 + W)  # a gap, as a rebase
            out.append(model(ids, positions=pos, mask=draft_mask(W, cache.length), cache=cache))
            out.append(model(ids, positions=pos, mask=causal_mask(W, cache.length), cache=cache))
            cache.commit(W // 2)
        return torch.cat([o.flatten() for o in out]), cache.kv.clone(), cache.raw_keys.clone()

    with torch.no_grad():
        fast, ref = _both(model, run)
    _assert_identical(fast, ref)


def test_multimodal_positions_are_bitwise_the_reference():
    model = _decoder("mrope", torch.float32)
    S = 12
    positions = torch.stack([torch.arange(S), torch.arange(S) // 3, torch.arange(S) % 3])[:, None]
    ids = torch.randint(0, model.config.vocab_size, (1, S))
    with torch.no_grad():
        fast, ref = _both(model, lambda: model(ids, positions=positions))
    _assert_identical(fast, ref)


def test_the_fused_weights_follow_the_parameters():
    """In-place edits, a new dtype and a loaded state dict re-fuse; HF names stay."""
    model = _decoder("gqa", torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (1, 9))
    with torch.no_grad():
        model(ids)
        model.model.layers[0].self_attn.k_proj.weight.mul_(2.0)
        model.model.layers[1].mlp.up_proj.weight.add_(0.1)
        _assert_identical(*_both(model, lambda: model(ids)))
        model.to(torch.float64)
        _assert_identical(*_both(model, lambda: model(ids)))
        other = _decoder("gqa", torch.float64, seed=7)
        model.load_state_dict(other.state_dict())
        _assert_identical(model(ids), other(ids))
    names = set(model.state_dict())
    assert "model.layers.0.self_attn.q_proj.weight" in names
    assert not any("qkv" in n or "gate_up" in n for n in names)


def test_autograd_runs_the_reference_path():
    model = _decoder("gqa", torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (1, 5))
    model(ids).sum().backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_the_rope_table_grows_and_matches():
    model = _decoder("gqa", torch.float64)
    ids = torch.randint(0, model.config.vocab_size, (1, 4))
    with torch.no_grad():
        for start in (0, 1500, 5000, -3):  # past the first table (4096 rows), negative
            pos = torch.arange(start, start + 4)
            _assert_identical(*_both(model, lambda pos=pos: model(ids, positions=pos)))
    assert model.fast.cos.shape[0] >= 5004
