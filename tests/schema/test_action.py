"""The action schema: bins, the chunk scaffold, the strict parser and the robot prompt."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.schema import ScaffoldParseError, SchemaError
from blockplan.schema.action import (
    ACTION_SECTION,
    ActionSchema,
    action_schema_from_dict,
    action_schema_to_dict,
    action_vocab,
    bin_centres,
    compile_action_scaffold,
    encode_actions,
    parse_actions,
    quantize,
    range_from_data,
    render_action_text,
    render_robot_prompt,
)
from blockplan.types import CameraFrame, RobotObservation


@pytest.fixture(scope="module")
def schema(tokenizer) -> ActionSchema:
    low = (-1.0, -2.0, 0.0, -0.5, -1.0, -1.0, 0.0)
    high = (1.0, 2.0, 1.0, 0.5, 1.0, 1.0, 0.08)
    return ActionSchema(
        horizon=5, action_dim=7, num_bins=64, action_low=low, action_high=high, proprio_dim=4
    )


def test_quantize_and_bin_centres():
    low, high, K = [0.0, -1.0], [1.0, 1.0], 4
    values = np.array([[0.0, -1.0], [0.24, 0.0], [0.25, 0.999], [1.0, 1.0], [1.5, -3.0]])
    bins, clipped = quantize(values, low, high, K)
    assert bins.tolist() == [[0, 0], [0, 2], [1, 3], [3, 3], [3, 0]]
    assert clipped == 2  # 1.5 and -3.0 lie outside their ranges
    centres = bin_centres(bins, low, high, K)
    assert np.allclose(centres[:2], [[0.125, -0.75], [0.125, 0.25]])
    with pytest.raises(SchemaError, match="not finite"):
        quantize(np.array([np.nan]), [0.0], [1.0], 4)


def test_range_from_data_uses_quantiles_and_widens_constant_dimensions():
    data = np.stack([np.linspace(0, 1, 101), np.full(101, 0.3)], axis=-1)
    low, high = range_from_data(data, quantile=0.1)
    assert low[0] == pytest.approx(0.1) and high[0] == pytest.approx(0.9)
    assert low[1] < 0.3 < high[1]
    assert range_from_data(data, quantile=0.0)[1][0] == 1.0


def test_the_scaffold_holds_the_chunk_in_timestep_blocks(schema, tokenizer):
    scaffold = compile_action_scaffold(schema, tokenizer, schema.action_dim)
    assert [s.name for s in scaffold.sections] == [ACTION_SECTION]
    assert int(scaffold.is_editable.sum()) == schema.horizon * schema.action_dim
    assert len(scaffold.blocks) == schema.horizon
    for block in scaffold.blocks:
        editable = scaffold.is_editable[block.start : block.end]
        assert not editable[0]  # every block opens with its step's structural lead
        assert int(editable.sum()) == schema.action_dim
    assert scaffold.blocks[0].start == 0 and scaffold.blocks[-1].end == len(scaffold)
    two_steps = compile_action_scaffold(schema, tokenizer, 2 * schema.action_dim)
    assert [int(two_steps.is_editable[b.start : b.end].sum()) for b in two_steps.blocks] == [
        14,
        14,
        7,
    ]
    with pytest.raises(SchemaError, match="multiple of the action dimension 7"):
        compile_action_scaffold(schema, tokenizer, 5)


def test_encode_then_parse_gives_the_bin_centres(schema, tokenizer):
    scaffold = compile_action_scaffold(schema, tokenizer, schema.action_dim)
    rng = np.random.default_rng(0)
    low, high = np.array(schema.action_low), np.array(schema.action_high)
    actions = rng.uniform(low, high, (schema.horizon, schema.action_dim))
    ids, clipped = encode_actions(actions, scaffold, tokenizer, schema)
    assert clipped == 0 and ids.shape == (len(scaffold),)
    chunk = parse_actions(ids, scaffold, tokenizer, schema)
    assert chunk.values.shape == (schema.horizon, schema.action_dim)
    width = (high - low) / schema.num_bins
    assert np.all(np.abs(chunk.values - actions) <= width / 2 + 1e-12)
    # the values are exactly the centres of their bins
    assert np.allclose((chunk.values - low) / width - 0.5, chunk.bins)
    assert np.array_equal(chunk.bins, quantize(actions, low, high, schema.num_bins)[0])
    vocab = action_vocab(schema, tokenizer)
    assert vocab.bin_offset == tokenizer.vocab_size
    assert render_action_text(chunk.bins).startswith('{"actions": [[')
    _, clipped = encode_actions(actions + 10.0, scaffold, tokenizer, schema)
    assert clipped == actions.size


def test_the_parser_is_strict(schema, tokenizer):
    scaffold = compile_action_scaffold(schema, tokenizer, schema.action_dim)
    ids, _ = encode_actions(
        np.zeros((schema.horizon, schema.action_dim)), scaffold, tokenizer, schema
    )
    structural = int(np.flatnonzero(~scaffold.is_editable)[3])
    bad = ids.copy()
    bad[structural] += 1
    with pytest.raises(ScaffoldParseError, match=f"structure@{structural}"):
        parse_actions(bad, scaffold, tokenizer, schema)
    value = int(np.flatnonzero(scaffold.is_editable)[schema.action_dim + 2])
    for wrong, what in ((5, "id 5"), (scaffold.mask_id, "the mask token")):
        bad = ids.copy()
        bad[value] = wrong
        with pytest.raises(ScaffoldParseError, match=r"step\[1\]\[2\]") as error:
            parse_actions(bad, scaffold, tokenizer, schema)
        assert what in str(error.value)
    with pytest.raises(ScaffoldParseError, match="ids"):
        parse_actions(ids[:-1], scaffold, tokenizer, schema)


def _observation(schema, instruction: str, seed: int = 0) -> RobotObservation:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
    frames = (CameraFrame("front", 0, image), CameraFrame("wrist", 0, image))
    return RobotObservation(0, frames, rng.uniform(-1, 1, schema.proprio_dim), instruction)


def test_the_prompt_has_a_fixed_length(schema, tokenizer):
    def render(obs):
        return render_robot_prompt(obs, tokenizer, schema, ("front", "wrist"), 1, 4)

    template = render(None)
    short = render(_observation(schema, "push", 1))
    long = render(_observation(schema, "pick up the red block and put it in the tray " * 3, 2))
    assert len(template) == len(short) == len(long)
    assert [(s.camera_index, s.frame_index) for s in short.image_spans] == [(0, 0), (1, 0)]
    vocab = action_vocab(schema, tokenizer)
    state = np.flatnonzero(vocab.is_bin(short.token_ids))
    assert len(state) == schema.proprio_dim  # the state is written as bin tokens
    assert not np.array_equal(short.token_ids[state], long.token_ids[state])
    no_state = ActionSchema(proprio_dim=0)
    assert not vocab.is_bin(
        render_robot_prompt(None, tokenizer, no_state, ("front",), 1, 4).token_ids
    ).any()
    with pytest.raises(SchemaError, match="special-token"):
        render(_observation(schema, "stop <|MASK|>"))


def test_the_schema_round_trips_and_validates(schema):
    data = action_schema_to_dict(schema)
    assert action_schema_from_dict(data) == schema
    assert ActionSchema().action_low == (-1.0,) * 7
    with pytest.raises(SchemaError, match="unknown action schema key 'bins'"):
        action_schema_from_dict({**data, "bins": 3})
    for bad, field in (
        (dict(action_low=(0.0,) * 6), "action_low"),
        (dict(action_low=(1.0,) * 7), "action_low\\[0\\]"),
        (dict(num_bins=1), "num_bins"),
        (dict(horizon=0), "horizon"),
        (dict(proprio_dim=-1), "proprio_dim"),
        (dict(bin_token_offset=-3), "bin_token_offset"),
    ):
        with pytest.raises(SchemaError, match=field):
            ActionSchema(**bad)
