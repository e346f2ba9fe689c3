"""encode_answer / parse_answer: the round-trip property and every kind of violation."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockplan.schema import (
    DrivingSchema,
    ScaffoldParseError,
    SchemaError,
    compile_scaffold,
    encode_answer,
    parse_answer,
    render_answer_text,
)
from blockplan.schema.answer import answer_pieces
from blockplan.schema.scaffold import compile_template
from blockplan.types import CRITICAL_OBJECT_KEYS, DrivingAnswer, Lateral, Longitudinal

WORDS = ["the", "lead", "vehicle", "brakes", "so", "I", "slow", "down", "lane", "gap", "12.5"]
EXPLANATIONS = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60).filter(
        lambda s: "<|" not in s
    ),
)
COORDINATE = st.floats(min_value=-999.99, max_value=999.99, allow_nan=False)


ANSWERS = st.builds(
    DrivingAnswer,
    critical_objects=st.lists(st.booleans(), min_size=12, max_size=12).map(
        lambda flags: dict(zip(CRITICAL_OBJECT_KEYS, flags, strict=True))
    ),
    explanation=EXPLANATIONS,
    longitudinal=st.sampled_from(list(Longitudinal)),
    lateral=st.sampled_from(list(Lateral)),
    waypoints=st.lists(COORDINATE, min_size=10, max_size=10).map(
        lambda v: np.array(v).reshape(5, 2)
    ),
)


def make_answer(**changes) -> DrivingAnswer:
    fields = {
        "critical_objects": {k: k == "pedestrian" for k in CRITICAL_OBJECT_KEYS},
        "explanation": "A pedestrian is crossing, so I stop.",
        "longitudinal": Longitudinal.STOP,
        "lateral": Lateral.LANE_FOLLOW,
        "waypoints": [[4.2, 0.0], [7.1, 0.05], [8.0, 0.1], [8.3, 0.1], [8.3, 0.1]],
    }
    fields.update(changes)
    return DrivingAnswer(**fields)


@pytest.fixture(scope="module")
def scaffold(schema, tokenizer):
    return compile_scaffold(schema, tokenizer, 16)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=ANSWERS)
def test_round_trip(answer, scaffold, tokenizer, schema):
    ids, report = encode_answer(answer, scaffold, tokenizer, schema)
    assert ids.shape == (len(scaffold),)
    assert np.array_equal(ids[~scaffold.is_editable], scaffold.token_ids[~scaffold.is_editable])
    parsed = parse_answer(ids, scaffold, tokenizer, schema)
    assert parsed.critical_objects == answer.critical_objects
    assert parsed.longitudinal is answer.longitudinal
    assert parsed.lateral is answer.lateral
    assert np.all(np.abs(parsed.waypoints - answer.waypoints) <= 0.005 + 1e-9)
    assert report.num_clamped == 0
    if report.is_explanation_truncated:
        assert answer.explanation.lstrip().startswith(parsed.explanation.lstrip())
        assert len(parsed.explanation) < len(answer.explanation)
    else:
        assert parsed.explanation == answer.explanation
    # the parsed answer encodes to the same ids (encoding is canonical)
    assert np.array_equal(encode_answer(parsed, scaffold, tokenizer, schema)[0], ids)


def test_explanation_is_null_padded(scaffold, tokenizer, schema):
    ids, report = encode_answer(make_answer(), scaffold, tokenizer, schema)
    section = scaffold.section("explanation")
    slot = ids[section.start : section.end][scaffold.is_editable[section.start : section.end]]
    text_ids = tokenizer.encode("A pedestrian is crossing, so I stop.")
    assert list(slot[: len(text_ids)]) == text_ids
    assert np.all(slot[len(text_ids) :] == scaffold.null_id)
    assert report == type(report)(len(text_ids), False, 0, 0)


def test_long_explanation_is_cut_at_a_word_boundary(scaffold, tokenizer, schema):
    words = [f"word{k}" for k in range(60)]
    answer = make_answer(explanation=" ".join(words))
    ids, report = encode_answer(answer, scaffold, tokenizer, schema)
    parsed = parse_answer(ids, scaffold, tokenizer, schema).explanation
    kept = parsed.split()
    assert kept == words[: len(kept)] and 0 < len(kept) < len(words)
    assert report.is_explanation_truncated
    assert report.num_dropped_words == len(words) - len(kept)
    assert report.num_explanation_tokens > schema.explanation_budget
    assert len(tokenizer.encode(parsed)) <= schema.explanation_budget
    # one more word would not have fitted
    longer = " ".join(words[: len(kept) + 1])
    assert len(tokenizer.encode(longer)) > schema.explanation_budget


def test_one_huge_word_is_cut_by_characters(scaffold, tokenizer, schema):
    answer = make_answer(explanation="x" * 500 + " end")
    ids, report = encode_answer(answer, scaffold, tokenizer, schema)
    parsed = parse_answer(ids, scaffold, tokenizer, schema).explanation
    assert parsed and set(parsed) == {"x"}
    assert report.num_dropped_words == 2


def test_explanation_escapes_json(scaffold, tokenizer, schema):
    text = 'He said "stop" \\ \n\u00e9\u4e2d'
    answer = make_answer(explanation=text)
    assert '"explanation": "He said \\"stop\\" \\\\ \\n\u00e9' in render_answer_text(answer, schema)
    ids, _ = encode_answer(answer, scaffold, tokenizer, schema)
    assert parse_answer(ids, scaffold, tokenizer, schema).explanation == text


def test_special_token_text_in_explanation_is_rejected(scaffold, tokenizer, schema):
    with pytest.raises(SchemaError, match="special"):
        encode_answer(make_answer(explanation="a <|NULL|> b"), scaffold, tokenizer, schema)


def test_out_of_range_numbers_are_clamped_and_counted(scaffold, tokenizer, schema):
    waypoints = [[1500.0, -2000.0], [np.inf, 0.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    ids, report = encode_answer(make_answer(waypoints=waypoints), scaffold, tokenizer, schema)
    assert report.num_clamped == 3
    parsed = parse_answer(ids, scaffold, tokenizer, schema).waypoints
    assert parsed[0].tolist() == [999.99, -999.99] and parsed[1, 0] == 999.99


def test_nan_waypoint_raises(scaffold, tokenizer, schema):
    waypoints = np.zeros((5, 2))
    waypoints[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"waypoints\[3\].y"):
        encode_answer(make_answer(waypoints=waypoints), scaffold, tokenizer, schema)


def test_answer_text(schema):
    text = render_answer_text(make_answer(), schema)
    assert text.startswith('{"critical_objects": {"nearby_vehicle": "no", "pedestrian": "yes"')
    assert '"future_meta_behavior": {"longitudinal": "stop", "lateral": "lane_follow"}' in text
    assert text.endswith(
        '"trajectory": [[+004.20, +000.00], [+007.10, +000.05], '
        "[+008.00, +000.10], [+008.30, +000.10], [+008.30, +000.10]]}"
    )


def test_text_and_scaffold_come_from_the_same_pieces(scaffold, tokenizer, schema):
    """Decoding the ids with the null padding removed gives the rendered text."""
    answer = make_answer()
    ids, _ = encode_answer(answer, scaffold, tokenizer, schema)
    decoded = tokenizer.decode([int(i) for i in ids if i != scaffold.null_id])
    assert decoded == render_answer_text(answer, schema)
    assert len(answer_pieces(schema)) > 0


# ---------------------------------------------------------------------------------------------
# Violations: each raises ScaffoldParseError naming the section and the slot.


@pytest.fixture
def good(scaffold, tokenizer, schema):
    ids, _ = encode_answer(make_answer(), scaffold, tokenizer, schema)
    return ids


def slot_of(schema, tokenizer, name):
    spans = compile_template(schema, tokenizer).slots
    return next(s for s in spans if s.slot.name == name)


def expect_error(ids, scaffold, tokenizer, schema, section, slot, match=None):
    with pytest.raises(ScaffoldParseError, match=match) as info:
        parse_answer(ids, scaffold, tokenizer, schema)
    assert info.value.section == section
    assert info.value.slot == slot
    return info.value


@pytest.mark.parametrize("section_index", [0, 1, 2, 3])
def test_changed_structural_token(good, scaffold, tokenizer, schema, section_index):
    section = scaffold.sections[section_index]
    frozen = np.flatnonzero(~scaffold.is_editable[section.start : section.end]) + section.start
    i = int(frozen[len(frozen) // 2])
    ids = good.copy()
    ids[i] = tokenizer.encode("x")[0]
    expect_error(ids, scaffold, tokenizer, schema, section.name, f"structure@{i}", "differs")


@pytest.mark.parametrize("value", ["maybe", "1", "<|NULL|>", " yes"])
def test_critical_object_not_yes_no(good, scaffold, tokenizer, schema, value):
    span = slot_of(schema, tokenizer, "animal")
    ids = good.copy()
    ids[span.start] = tokenizer.encode(value)[0]
    expect_error(ids, scaffold, tokenizer, schema, "critical_objects", "animal", "yes/no")


def test_unfilled_mask(good, scaffold, tokenizer, schema):
    span = slot_of(schema, tokenizer, "waypoints[1].x[2]")
    ids = good.copy()
    ids[span.start] = scaffold.mask_id
    expect_error(ids, scaffold, tokenizer, schema, "trajectory", "waypoints[1].x[2]", "mask")


@pytest.mark.parametrize(
    ("slot", "value"),
    [
        ("waypoints[2].y[3]", "a"),
        ("waypoints[0].x[0]", "+"),
        ("waypoints[4].y.sign", "5"),
        ("waypoints[3].x.sign", "<|NULL|>"),
    ],
)
def test_malformed_number(good, scaffold, tokenizer, schema, slot, value):
    span = slot_of(schema, tokenizer, slot)
    ids = good.copy()
    ids[span.start] = tokenizer.encode(value)[0]
    expect_error(ids, scaffold, tokenizer, schema, "trajectory", slot, "malformed number")


@pytest.mark.parametrize(
    ("slot", "words"),
    [
        ("longitudinal", ["brake"]),
        ("lateral", ["lane", "_change"]),
        ("longitudinal", ["yes"]),
        ("lateral", []),
    ],
)
def test_out_of_vocabulary_meta_behavior(good, scaffold, tokenizer, schema, slot, words):
    span = slot_of(schema, tokenizer, slot)
    value = [i for w in words for i in tokenizer.encode(w)]
    ids = good.copy()
    ids[span.start : span.end] = value + [scaffold.null_id] * (span.length - len(value))
    expect_error(ids, scaffold, tokenizer, schema, "future_meta_behavior", slot, "vocabulary")


def test_token_after_null_padding(good, scaffold, tokenizer, schema):
    for name, section in (("longitudinal", "future_meta_behavior"), ("explanation", "explanation")):
        span = slot_of(schema, tokenizer, name)
        ids = good.copy()
        ids[span.end - 1] = tokenizer.encode("go")[0]
        expect_error(ids, scaffold, tokenizer, schema, section, name, "after the padding")


@pytest.mark.parametrize(("text", "match"), [('say "hi', "JSON"), ("a\\", "JSON")])
def test_explanation_not_json_content(good, scaffold, tokenizer, schema, text, match):
    span = slot_of(schema, tokenizer, "explanation")
    value = tokenizer.encode(text)
    ids = good.copy()
    ids[span.start : span.end] = value + [scaffold.null_id] * (span.length - len(value))
    expect_error(ids, scaffold, tokenizer, schema, "explanation", "explanation", match)


def test_special_token_inside_explanation(good, scaffold, tokenizer, schema):
    span = slot_of(schema, tokenizer, "explanation")
    ids = good.copy()
    ids[span.start + 1] = tokenizer.token_id("<|im_end|>")
    expect_error(ids, scaffold, tokenizer, schema, "explanation", "explanation", "special")


@pytest.mark.parametrize("cut", [1, -1])
def test_wrong_length(good, scaffold, tokenizer, schema, cut):
    ids = good[:-1] if cut > 0 else np.concatenate([good, good[:1]])
    expect_error(ids, scaffold, tokenizer, schema, "answer", "ids")


def test_parse_accepts_a_list(good, scaffold, tokenizer, schema):
    a = parse_answer(list(good), scaffold, tokenizer, schema)
    assert a.longitudinal is Longitudinal.STOP and a.critical_objects["pedestrian"]
    assert np.allclose(a.waypoints, make_answer().waypoints)


def test_other_schema_round_trip(tokenizer):
    schema = DrivingSchema(explanation_budget=64, int_digits=2, frac_digits=1)
    scaffold = compile_scaffold(schema, tokenizer, 8)
    answer = make_answer(waypoints=[[1.26, -2.0], [3, 4], [5, 6], [7, 8], [120.0, -0.04]])
    ids, report = encode_answer(answer, scaffold, tokenizer, schema)
    parsed = parse_answer(ids, scaffold, tokenizer, schema)
    assert report.num_clamped == 1
    assert parsed.waypoints[0].tolist() == [1.3, -2.0] and parsed.waypoints[4, 0] == 99.9


def test_foreign_tokenizer_with_other_token_names(tmp_path):
    """A tokenizer.json made elsewhere (Fast-dLLM names its mask `|<MASK>|`) works as is once
    the schema names its tokens."""
    from blockplan.schema import corpus, load_tokenizer, render_prompt, train_tokenizer

    names = (
        "|<MASK>|",
        "<|pad|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|vision_start|>",
        "<|image_pad|>",
        "<|vision_end|>",
    )
    texts = list(corpus.default_corpus(num_answers=200))
    train_tokenizer(texts, 600, tmp_path / "tokenizer.json", special_tokens=names)
    tokenizer = load_tokenizer(tmp_path / "tokenizer.json")
    schema = DrivingSchema(mask_token="|<MASK>|", null_token="<|pad|>")
    scaffold = compile_scaffold(schema, tokenizer, 32)
    assert scaffold.mask_id == tokenizer.token_id("|<MASK>|")
    ids, _ = encode_answer(make_answer(), scaffold, tokenizer, schema)
    assert parse_answer(ids, scaffold, tokenizer, schema).lateral is Lateral.LANE_FOLLOW
    assert len(render_prompt(None, tokenizer, schema, ("front",), 2, 4)) > 0
