import math

import numpy as np
import pytest

from blockplan.schema import (
    SECTION_NAMES,
    DrivingSchema,
    SchemaError,
    compile_scaffold,
    section_index,
    train_tokenizer,
)
from blockplan.schema.scaffold import template_for

BLOCK_SIZES = (1, 2, 3, 5, 7, 8, 10, 13, 16, 24, 32, 64, 1000)


def test_sections_in_causal_order_cover_the_answer(schema, tokenizer):
    scaffold = compile_scaffold(schema, tokenizer, 32)
    assert tuple(s.name for s in scaffold.sections) == SECTION_NAMES
    assert scaffold.sections[0].start == 0
    assert scaffold.sections[-1].end == len(scaffold)
    for a, b in zip(scaffold.sections, scaffold.sections[1:], strict=False):
        assert a.end == b.start
    counts = {s.name: s.num_editable for s in scaffold.sections}
    assert counts == {
        "critical_objects": 12,
        "explanation": schema.explanation_budget,
        "future_meta_behavior": 2 * schema.meta_budget,
        "trajectory": 10 * 6,  # sign + 5 digits per number; the point is structural
    }
    assert int(scaffold.is_editable.sum()) == sum(counts.values())


def test_structural_positions_are_never_editable(schema, tokenizer):
    scaffold = compile_scaffold(schema, tokenizer, 16)
    ids, editable = scaffold.token_ids, scaffold.is_editable
    assert np.all(ids[editable] == scaffold.mask_id)
    assert not np.any(ids[~editable] == scaffold.mask_id)
    assert not np.any(ids[~editable] == scaffold.null_id)
    text = tokenizer.decode(list(ids))
    assert text.startswith('{"critical_objects": {"nearby_vehicle": "<|MASK|>"')
    assert text.endswith("<|MASK|><|MASK|>]]}")
    # the decimal point of every waypoint coordinate is frozen
    assert text.count(".<|MASK|><|MASK|>") == 10
    for s in scaffold.sections:
        positions = scaffold.editable_positions(s.name)
        assert len(positions) == s.num_editable
        assert np.all((positions >= s.start) & (positions < s.end))


def test_scaffold_is_immutable(schema, tokenizer):
    scaffold = compile_scaffold(schema, tokenizer, 32)
    with pytest.raises(ValueError):
        scaffold.token_ids[0] = 0
    with pytest.raises(ValueError):
        scaffold.is_editable[0] = True


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_blocks_never_straddle_sections(schema, tokenizer, block_size):
    scaffold = compile_scaffold(schema, tokenizer, block_size)
    blocks = scaffold.blocks
    assert blocks[0].start == 0 and blocks[-1].end == len(scaffold)
    for a, b in zip(blocks, blocks[1:], strict=False):
        assert a.end == b.start  # contiguous cover, in order
    for s in scaffold.sections:
        mine = [b for b in blocks if b.section == s.name]
        assert len(mine) == math.ceil(s.num_editable / block_size)
        assert mine[0].start == s.start and mine[-1].end == s.end
        for b in mine:
            assert s.start <= b.start < b.end <= s.end
            num_editable = int(scaffold.is_editable[b.start : b.end].sum())
            assert 1 <= num_editable <= block_size
            # every block but a section's first starts on an editable position
            if b is not mine[0]:
                assert scaffold.is_editable[b.start]
        full = [int(scaffold.is_editable[b.start : b.end].sum()) for b in mine[:-1]]
        assert all(n == block_size for n in full)


def test_block_size_does_not_change_the_template(schema, tokenizer):
    a = compile_scaffold(schema, tokenizer, 7)
    b = compile_scaffold(schema, tokenizer, 32)
    assert np.array_equal(a.token_ids, b.token_ids)
    assert a.block_size == 7 and len(a.blocks) > len(b.blocks)


@pytest.mark.parametrize("block_size", [0, -3, 2.5, True])
def test_bad_block_size(schema, tokenizer, block_size):
    with pytest.raises(SchemaError, match="block_size"):
        compile_scaffold(schema, tokenizer, block_size)


def test_explanation_budget_sets_the_section(tokenizer):
    scaffold = compile_scaffold(DrivingSchema(explanation_budget=192), tokenizer, 32)
    section = scaffold.section("explanation")
    assert section.num_editable == 192
    assert sum(b.section == "explanation" for b in scaffold.blocks) == 6


def test_meta_budget_too_small_for_a_word(tokenizer):
    with pytest.raises(SchemaError, match="future_meta_behavior.lateral word .* meta_budget is 1"):
        compile_scaffold(DrivingSchema(meta_budget=1), tokenizer, 32)


def test_tokenizer_without_the_schema_tokens():
    plain = train_tokenizer(["yes no keep"] * 10, 300, special_tokens=("<|endoftext|>",))
    with pytest.raises(SchemaError, match="special token"):
        compile_scaffold(DrivingSchema(), plain, 32)


def test_scaffold_of_another_schema_is_rejected(schema, tokenizer):
    other = compile_scaffold(DrivingSchema(explanation_budget=8), tokenizer, 32)
    with pytest.raises(SchemaError, match="does not match"):
        template_for(other, schema, tokenizer)


def test_section_index(schema, tokenizer):
    scaffold = compile_scaffold(schema, tokenizer, 32)
    index = section_index(scaffold)
    for k, s in enumerate(scaffold.sections):
        assert np.all(index[s.start : s.end] == k)
