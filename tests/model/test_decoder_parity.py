"""Parity of `Decoder` (loaded with `load_pretrained`) with transformers' Qwen2ForCausalLM."""

from __future__ import annotations

import json

import pytest
import torch

from blockplan.decoding.kv_cache import KVCache
from blockplan.model.masks import causal_mask
from blockplan.model.pretrained import load_pretrained, save_pretrained
from blockplan.model.weights import WeightsError
from tests.optional import importorskip

transformers = importorskip("transformers")


def _hf_model(tmp_path, tie: bool, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        rope_theta=10000.0,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random non-trivial biases and norms
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "hf")
    return model


@pytest.mark.parametrize("tie", [False, True])
def test_logits_match_transformers(tmp_path, tie):
    hf = _hf_model(tmp_path, tie)
    ours = load_pretrained(tmp_path / "hf")
    ids = torch.randint(0, 97, (3, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        got = ours(ids)
    assert got.shape == (3, 21, 97)
    assert (got - expected).abs().max().item() <= 1e-4


def test_logits_match_transformers_with_cache(tmp_path):
    hf = _hf_model(tmp_path, tie=False, seed=3)
    ours = load_pretrained(tmp_path / "hf")
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(ids).logits  # (2, 30, V)
        cache = KVCache.for_model(ours.config, max_len=64, max_batch=2)
        cache.fork(2)  # two rows, empty prefix
        chunks = []
        # prefill 11, then 1 token, then 7, then one by one
        cuts = [0, 11, 12, 19, *range(20, 31)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            chunks.append(ours(ids[:, a:b], cache=cache, mask=causal_mask(b - a, a)))
            cache.commit(b - a)
        got = torch.cat(chunks, dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def test_sharded_folder_and_roundtrip(tmp_path):
    hf = _hf_model(tmp_path, tie=False)
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    ours = load_pretrained(tmp_path / "sharded")
    save_pretrained(ours, tmp_path / "ours")
    manifest = json.loads((tmp_path / "ours" / "manifest.json").read_text())
    assert set(manifest["sha256"]) == {"config.json", "model.safetensors"}
    back = load_pretrained(tmp_path / "ours")
    ids = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        assert torch.equal(back(ids), ours(ids))
        assert (back(ids) - hf(ids).logits).abs().max() <= 1e-4
    # transformers reads our folder too
    again = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path / "ours")
    with torch.no_grad():
        assert (again(ids).logits - back(ids)).abs().max() <= 1e-4


def test_manifest_mismatch_is_an_error(tmp_path):
    _hf_model(tmp_path, tie=True)
    save_pretrained(load_pretrained(tmp_path / "hf"), tmp_path / "ours")
    (tmp_path / "ours" / "config.json").write_text(
        (tmp_path / "ours" / "config.json").read_text() + " "
    )
    with pytest.raises(WeightsError, match="config.json"):
        load_pretrained(tmp_path / "ours")


def test_config_errors_name_the_field():
    from blockplan.model.config import DecoderConfig, ModelConfigError

    base = dict(
        vocab_size=10,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    with pytest.raises(ModelConfigError, match="num_key_value_heads"):
        DecoderConfig(**{**base, "num_key_value_heads": 3})
    with pytest.raises(ModelConfigError, match="hidden_size"):
        DecoderConfig.from_dict({k: v for k, v in base.items() if k != "hidden_size"})
    with pytest.raises(ModelConfigError, match="sliding"):
        DecoderConfig.from_dict({**base, "use_sliding_window": True})
    config = DecoderConfig.from_dict({**base, "rope_parameters": {"rope_theta": 5e5}})
    assert config.rope_theta == 5e5
