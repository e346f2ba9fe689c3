"""The flow head in the planner: text sections by the strategy, the head over the (forked)
prefix cache, the codec writing its waypoints into the trajectory slots, seeded noise."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from blockplan.bench.decoding import flow_head_report
from blockplan.decoding.flow import flow_noise
from blockplan.decoding.strategies import rollout_section
from blockplan.model.planner_model import PlannerModel
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation
from blockplan.schema.codec import parse_answer, write_waypoints
from blockplan.schema.spec import SchemaError
from tests.flow.conftest import flow_planner
from tests.optional import importorskip


def token_twin(planner: Planner) -> Planner:
    """The same decoder and vision weights with the token trajectory head."""
    mc = dataclasses.replace(planner.model.config, trajectory_head="tokens", flow_head=None)
    model = PlannerModel(mc)
    missing = model.load_state_dict(planner.model.state_dict(), strict=False)
    assert not missing.missing_keys
    return Planner(model, planner.tokenizer, planner.config, planner.schema)


@pytest.mark.parametrize("strategy", ["ar", "scaffold_spec", "section_diffusion", "rollouts"])
def test_text_matches_the_token_model_and_the_codec_fills_the_trajectory(planner, strategy):
    obs = synthetic_observation(planner.config, 1)
    decoded = planner.decode(obs, strategy)
    result = decoded.result
    n = planner.config.rollouts.num_rollouts if strategy == "rollouts" else 1
    assert result.waypoints.shape == (n, 5, 2) and result.flow_evaluations == 4
    trajectory = rollout_section(planner.scaffold)
    # the text before the trajectory is what the same decoder decodes with its token head
    twin = token_twin(planner).decode(obs, strategy).result.tokens
    np.testing.assert_array_equal(
        result.tokens[:, : trajectory.start], twin[:1, : trajectory.start].repeat(n, 0)
    )
    # the answer parses strictly, and its waypoints are the head's, to the schema's 0.01 m
    clipped = np.clip(result.waypoints, -999.99, 999.99)
    np.testing.assert_allclose(decoded.plan.rollouts, clipped, rtol=0, atol=0.005 + 1e-9)
    for row, answer_wp in zip(result.tokens, decoded.plan.rollouts, strict=True):
        answer = parse_answer(row, planner.scaffold, planner.tokenizer, planner.schema)
        np.testing.assert_array_equal(answer.waypoints, answer_wp)


def test_write_waypoints_rounds_clamps_and_refuses_nan(planner):
    ids = planner.scaffold.token_ids
    wp = np.array([[1.234, -0.004], [-12.5, 3.0], [1500.0, -2000.0], [0.0, -0.0], [99.999, 1e-9]])
    out, clamped = write_waypoints(ids, wp, planner.scaffold, planner.tokenizer, planner.schema)
    assert clamped == 2
    before = rollout_section(planner.scaffold).start
    np.testing.assert_array_equal(out[:before], np.asarray(ids)[:before])  # text untouched
    # fill the text slots from a decoded answer so the whole row parses
    row = planner.decode(synthetic_observation(planner.config, 0)).result.tokens[0].copy()
    row, _ = write_waypoints(row, wp, planner.scaffold, planner.tokenizer, planner.schema)
    back = parse_answer(row, planner.scaffold, planner.tokenizer, planner.schema).waypoints
    expected = [[1.23, 0.0], [-12.5, 3.0], [999.99, -999.99], [0.0, 0.0], [100.0, 0.0]]
    np.testing.assert_array_equal(back, expected)
    with pytest.raises(SchemaError, match="NaN"):
        write_waypoints(
            ids, np.full((5, 2), np.nan), planner.scaffold, planner.tokenizer, planner.schema
        )


def test_forked_rollouts_equal_independent_head_runs(planner):
    obs = synthetic_observation(planner.config, 2)
    rolled = planner.decode(obs, "rollouts").result.waypoints  # (3, 5, 2), one batch
    planner.decode(obs, "scaffold_spec")  # the cache now holds the same prefix, one row
    keys, values = planner.flow.prefix(planner.cache)
    noise = flow_noise(planner.config.rollouts.seed, 3, obs.stamp_ns)
    for i in range(3):
        alone, _ = planner.flow.sample_prefix(keys, values, noise[i : i + 1])
        np.testing.assert_allclose(rolled[i], alone[0], rtol=0, atol=1e-4)
    assert np.abs(rolled[0] - rolled[1]).max() > 1e-3  # different noise, different plans


def test_one_plan_is_deterministic_with_fixed_noise(planner):
    obs = synthetic_observation(planner.config, 3)
    later = dataclasses.replace(obs, stamp_ns=obs.stamp_ns + 10**9)
    # as a fresh planner: no draft from the fixture's last plan (other windows write the
    # prefix K/V with other float32 rounding, which the head reads)
    planner.previous_answer = None
    a = planner.decode(obs).result.waypoints
    b = flow_planner().decode(obs).result.waypoints  # a fresh planner, same seed
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(flow_noise(0, 1, 5), flow_noise(0, 1, 7))  # N = 1: fixed
    assert not np.array_equal(flow_noise(0, 1), flow_noise(1, 1))  # the seed matters
    assert planner.decode(later).result.waypoints.shape == (1, 5, 2)


def test_cached_and_uncached_schedules_on_the_same_noise(planner):
    obs = synthetic_observation(planner.config, 4)
    planner.decode(obs)
    keys, values = planner.flow.prefix(planner.cache)
    noise = flow_noise(0, 1)
    cached, n_cached = planner.flow.sample_prefix(keys, values, noise)
    full, n_full = planner.flow.sample_prefix(keys, values, noise, range(1, 9))
    assert (n_cached, n_full) == (4, 8)
    gap = float(np.abs(cached - full).max())
    assert 0 < gap < np.inf  # measured, not assumed equal
    report = flow_head_report(planner, [obs], num_rollouts=3, repeats=1)
    for key in ("ms_uncached", "ms_cached", "cached_speedup", "max_waypoint_diff_m"):
        assert report[key] > 0, key
    assert report["n1"]["evaluations"] == {"uncached": 8, "cached": 4}
    assert report["n3"]["max_waypoint_diff_m"] > 0
    # the uncached schedule configured: the plan is plain Euler
    plain = flow_planner(**{"flow.evaluate_steps": []})
    np.testing.assert_allclose(plain.decode(obs).result.waypoints, full, rtol=0, atol=1e-5)


def test_strategies_without_a_flow_path_are_refused(planner):
    obs = synthetic_observation(planner.config, 0)
    for strategy in ("full_diffusion", "pipelined"):
        with pytest.raises(ValueError, match="flow trajectory head"):
            planner.decode(obs, strategy)


def test_onnxruntime_head_matches_torch():
    importorskip("onnxruntime")
    importorskip("onnx")
    reference = flow_planner()
    ort = Planner(
        reference.model,
        reference.tokenizer,
        reference.config.with_params({"model.backend": "onnxruntime"}),
        reference.schema,
    )
    assert ort.flow.velocity is not None  # the exported head graph runs, not the torch head
    obs = synthetic_observation(reference.config, 5)
    for strategy in ("scaffold_spec", "rollouts"):
        a = reference.decode(obs, strategy).result
        b = ort.decode(obs, strategy).result
        np.testing.assert_allclose(a.waypoints, b.waypoints, rtol=0, atol=1e-3)
        np.testing.assert_array_equal(a.tokens, b.tokens)
    with torch.no_grad():
        reference.decode(obs)
        keys, values = reference.flow.prefix(reference.cache)
        x, tau = torch.randn(1, 5, 2), torch.tensor([0.3])
        gap = reference.flow.head(x, tau, keys, values) - ort.flow.velocity(x, tau, keys, values)
    assert float(gap.abs().max()) < 1e-4
