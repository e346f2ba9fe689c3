"""The flow head's config, the Euler integrator with step caching, the head's K/V reading."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.model.config import ModelConfigError
from blockplan.model.flow_head import (
    FlowHead,
    FlowHeadConfig,
    KVRecorder,
    check_schedule,
    integrate,
)
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.presets import preset_config
from blockplan.model.pretrained import load_pretrained
from blockplan.model.weights import read_config
from blockplan.schema import default_schema, default_tokenizer


def test_existing_folders_are_token_heads_and_stay_unchanged(repo_root):
    folder = repo_root / "models" / "blockplan-tiny"
    raw = read_config(folder)
    config = PlannerModelConfig.from_dict(raw)
    assert config.trajectory_head == "tokens" and config.flow_head is None
    assert "trajectory_head" not in config.to_dict()  # a token folder writes what it read
    assert config.to_dict() == raw


def test_flow_config_round_trips_and_bad_values_are_named():
    mc = preset_config("test-flow", 700, ("front",), 1)
    assert mc.trajectory_head == "flow" and mc.flow_head == FlowHeadConfig()
    d = json.loads(json.dumps(mc.to_dict()))
    assert d["trajectory_head"] == "flow"
    assert PlannerModelConfig.from_dict(d) == mc
    with pytest.raises(ModelConfigError, match="trajectory_head"):
        dataclasses.replace(mc, trajectory_head="digits")
    with pytest.raises(ModelConfigError, match="read_layers"):
        dataclasses.replace(mc, flow_head=FlowHeadConfig(read_layers=(0, 9)))
    with pytest.raises(ModelConfigError, match="waypoint_std"):
        FlowHeadConfig(waypoint_std=(0.0,) * 10)
    with pytest.raises(ModelConfigError, match="unknown key"):
        FlowHeadConfig.from_dict({"width": 64, "depth": 3})
    tokens = preset_config("test", 700, ("front",), 1)
    with pytest.raises(ModelConfigError, match="flow_head settings"):
        dataclasses.replace(tokens, flow_head=FlowHeadConfig())


def test_flow_folder_round_trips_the_head(tmp_path):
    tok = default_tokenizer()
    mc = preset_config("test-flow", tok.vocab_size, ("front",), 1, schema=default_schema())
    torch.manual_seed(0)
    model = PlannerModel(mc)
    model.save_pretrained(tmp_path / "m", tok.to_str())
    loaded = load_pretrained(tmp_path / "m")
    assert loaded.config == mc
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_schedule_rules():
    assert check_schedule(8, [1, 2, 7, 8]) == (1, 2, 7, 8)
    assert check_schedule(8, []) == tuple(range(1, 9))
    with pytest.raises(ValueError, match="include step 1"):
        check_schedule(8, [2, 7])
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        check_schedule(8, [1, 9])


def test_euler_counts_and_caching_on_known_fields():
    x0 = torch.randn(3, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    target = torch.randn(3, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    # The ideal rectified flow towards one target: v = (x1 - x) / (1 - τ), constant along
    # the straight path, so Euler is exact and caching the velocity changes nothing.
    def straight(x, tau):
        return (target - x) / (1 - tau)[:, None, None]

    full, n_full = integrate(straight, x0, 8)
    cached, n_cached = integrate(straight, x0, 8, [1, 2, 7, 8])
    assert (n_full, n_cached) == (8, 4)
    torch.testing.assert_close(full, target, rtol=0, atol=1e-12)
    torch.testing.assert_close(cached, target, rtol=0, atol=1e-12)

    # A curved field (dx/dτ = x): steps 3-6 reuse the velocity computed at step 2; the
    # expected result is that rule applied by hand.
    def grow(x, tau):
        return x

    h = 1 / 8
    full, _ = integrate(grow, x0, 8)
    torch.testing.assert_close(full, x0 * (1 + h) ** 8)
    expected = x0.clone()
    v = None
    for k in range(1, 9):
        if k in (1, 2, 7, 8):
            v = expected.clone()
        expected = expected + h * v
    cached, _ = integrate(grow, x0, 8, [1, 2, 7, 8])
    torch.testing.assert_close(cached, expected)
    assert (cached - full).abs().max() > 1e-3  # the cache is an approximation here


def test_head_reads_the_prefix_and_masks_padding():
    mc = preset_config("test-flow", 700, ("front",), 1)
    torch.manual_seed(0)
    head = FlowHead(mc.flow_head, mc.decoder).eval()
    c = mc.decoder
    R = len(head.layer_indices)
    keys = torch.randn(R, 2, c.num_key_value_heads, 7, c.dim_per_head)
    values = torch.randn_like(keys)
    x, tau = torch.randn(2, 5, 2), torch.tensor([0.1, 0.6])
    v = head(x, tau, keys, values)
    assert v.shape == (2, 5, 2)
    # another prefix gives another velocity: the head does read it
    assert (head(x, tau, keys, values * 2) - v).abs().max() > 1e-4
    # padded slots behind a mask change nothing
    pk = torch.cat([keys, torch.randn(R, 2, c.num_key_value_heads, 3, c.dim_per_head)], 3)
    pv = torch.cat([values, torch.randn_like(pk[..., :3, :])], 3)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, :7] = True
    torch.testing.assert_close(head(x, tau, pk, pv, mask), v, rtol=0, atol=1e-5)


def test_recorder_keeps_the_layers_kv():
    mc = preset_config("test", 700, ("front",), 1)
    torch.manual_seed(0)
    model = PlannerModel(mc).eval()
    ids = torch.randint(0, 700, (2, 9))
    rec = KVRecorder((0, mc.decoder.num_hidden_layers - 1))
    with torch.no_grad():
        a = model(ids)
        b = model(ids, cache=rec)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the recorder does not change the forward
    keys, values = rec.prefix(5)
    assert keys.shape == (2, 2, mc.decoder.num_key_value_heads, 5, mc.decoder.dim_per_head)
    assert np.isfinite(values.numpy()).all()
