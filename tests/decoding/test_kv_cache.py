from __future__ import annotations

import pytest
import torch

from blockplan.decoding.kv_cache import KVCache, KVCacheFullError


def _write(cache, n, value):
    B = cache.batch_size
    cache.write_positions(torch.arange(cache.length, cache.length + n).expand(B, n))
    k = torch.full((B, 2, n, 4), float(value))
    return cache.write(0, k, k, k + 1)


def test_commit_fork_reset():
    cache = KVCache(num_layers=1, num_kv_heads=2, head_dim=4, max_len=10, max_batch=3)
    buffer = cache.kv.data_ptr()
    k, v = _write(cache, 4, 1.0)
    assert k.shape == (1, 2, 4, 4) and cache.length == 0
    cache.commit(3)
    assert cache.length == 3
    with pytest.raises(ValueError):
        cache.commit(1)  # nothing pending any more
    k, _ = _write(cache, 2, 2.0)  # overwrites slot 3 (not committed)
    assert k.shape[2] == 5 and (k[0, :, 3:] == 2.0).all() and (k[0, :, :3] == 1.0).all()
    cache.commit(1)  # slot 4 is rejected: the next forward overwrites it
    assert cache.length == 4
    cache.fork(3)
    assert cache.batch_size == 3
    assert torch.equal(cache.kv[:, :, 2, :, :4], cache.kv[:, :, 0, :, :4])
    assert torch.equal(cache.positions[2, :4], torch.arange(4))
    k, _ = _write(cache, 1, 5.0)
    assert k.shape == (3, 2, 5, 4)
    cache.reset()
    assert (cache.length, cache.batch_size) == (0, 1)
    assert cache.kv.data_ptr() == buffer  # nothing reallocated


def test_errors_name_the_problem():
    cache = KVCache(num_layers=1, num_kv_heads=1, head_dim=2, max_len=4, max_batch=2)
    with pytest.raises(KVCacheFullError):
        cache.write_positions(torch.arange(5)[None])
    with pytest.raises(ValueError, match="fork"):
        cache.fork(3)
    with pytest.raises(ValueError, match="commit"):
        cache.commit(1)
    with pytest.raises(ValueError, match="batch"):
        cache.write_positions(torch.zeros(2, 1, dtype=torch.long))


def test_rebase_is_exact(decoder_factory):
    """Shifting every cached position by the same offset changes no logit (RoPE depends on
    relative positions only), and `rebase` re-rotates from the pre-RoPE keys."""
    model = decoder_factory(0)
    ids = torch.randint(3, 16, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = KVCache.for_model(model.config, 16, 1, torch.float64)
        model(ids[:, :11], cache=cache)
        cache.commit(11)
        expected = model(ids[:, 11:], cache=cache)  # position 11
        cache.rebase(0, 11, torch.arange(11) + 40)
        got = model(ids[:, 11:], positions=torch.tensor([51]), cache=cache)
    assert (got - expected).abs().max() < 1e-9
    assert torch.equal(cache.positions[0, :11], torch.arange(40, 51))


def test_append_places_pre_rope_slots_at_new_positions(decoder_factory):
    """Slots copied out of one cache (pre-RoPE keys and values) and appended to another at
    shifted positions give the logits of the shifted prompt; appending needs one row."""
    model = decoder_factory(0)
    ids = torch.randint(3, 16, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        source = KVCache.for_model(model.config, 16, 2, torch.float64)
        model(ids[:, :8], cache=source)
        source.commit(8)
        raw, values = source.raw_keys[:, 0, :, :8], source.kv[:, 1, 0, :, :8]
        expected = model(ids[:, 8:], positions=torch.tensor([8]), cache=source)
        target = KVCache.for_model(model.config, 16, 2, torch.float64)
        target.append(raw[:, :, :3], values[:, :, :3], torch.arange(3) + 20)
        target.append(raw[:, :, 3:], values[:, :, 3:], torch.arange(3, 8) + 20)
        assert target.length == 8 and target.num_pending == 0
        got = model(ids[:, 8:], positions=torch.tensor([28]), cache=target)
        assert (got - expected).abs().max() < 1e-9
        target.fork(2)
        with pytest.raises(ValueError, match="rows active"):
            target.append(raw[:, :, :1], values[:, :, :1], torch.arange(1))
        target.reset()
        with pytest.raises(KVCacheFullError):
            target.append(raw.repeat(1, 1, 3, 1), values.repeat(1, 1, 3, 1), torch.arange(24))
