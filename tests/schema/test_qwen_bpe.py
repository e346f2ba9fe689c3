"""The schema under a Qwen2.5-VL-like byte-level BPE (Fast-dDrive format, added tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.schema import (
    DrivingSchema,
    SchemaError,
    compile_scaffold,
    encode_answer,
    fastddrive_schema,
    load_tokenizer,
    parse_answer,
    render_answer_text,
    render_prompt,
    train_tokenizer,
)
from blockplan.schema.corpus import random_answer
from blockplan.schema.qwen_tokens import (
    BLOCK_DIFFUSION_TOKENS,
    QWEN2_5_VL_SPECIAL_TOKENS,
    build_qwen_like_tokenizer,
    qwen_like_corpus,
)


@pytest.fixture(scope="module")
def qwen_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    build_qwen_like_tokenizer(path)
    return load_tokenizer(path)  # the file as a checkpoint ships it


def test_special_tokens_are_added_after_the_merges_and_resolve_by_name(qwen_tokenizer):
    ids = [qwen_tokenizer.token_id(n) for n in QWEN2_5_VL_SPECIAL_TOKENS + BLOCK_DIFFUSION_TOKENS]
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # Qwen-style: a run at the end
    assert ids[-1] == qwen_tokenizer.vocab_size - 1
    assert qwen_tokenizer.encode("a|<MASK>|b")[1] == qwen_tokenizer.token_id("|<MASK>|")


def test_fastddrive_format_text():
    schema = fastddrive_schema()
    answer = random_answer(np.random.default_rng(0), schema)
    answer.waypoints[0] = (14.7, -0.04)
    text = render_answer_text(answer, schema)
    assert '"trajectory": [[ +014.70, -000.04], [ +' in text
    assert text.endswith("]]}")
    assert '"}, "explanation": "' in text


def test_scaffold_slots_are_single_tokens(qwen_tokenizer):
    schema = fastddrive_schema()
    scaffold = compile_scaffold(schema, qwen_tokenizer, 32)
    counts = {s.name: s.num_editable for s in scaffold.sections}
    assert counts == {
        "critical_objects": 12,
        "explanation": 192,
        "future_meta_behavior": 6,
        "trajectory": 60,
    }
    for sign in (" +", " -", *"0123456789"):
        assert len(qwen_tokenizer.encode(sign)) == 1
    assert scaffold.mask_id == qwen_tokenizer.token_id("|<MASK>|")
    assert all(b.end - b.start >= 1 for b in scaffold.blocks)


@pytest.mark.parametrize("seed", range(8))
def test_piecewise_ids_equal_the_tokenization_of_the_text(qwen_tokenizer, seed):
    """What the scaffold writes is what the BPE makes of the decoded text (NULL padding
    splits the text like any added token), so a checkpoint trained on the text sees its
    own token sequence; and the strict parser reads it back."""
    schema = fastddrive_schema()
    scaffold = compile_scaffold(schema, qwen_tokenizer, 32)
    answer = random_answer(np.random.default_rng(seed), schema)
    ids, report = encode_answer(answer, scaffold, qwen_tokenizer, schema)
    assert not report.is_explanation_truncated
    assert qwen_tokenizer.encode(qwen_tokenizer.decode(ids.tolist())) == ids.tolist()
    parsed = parse_answer(ids, scaffold, qwen_tokenizer, schema)
    np.testing.assert_allclose(parsed.waypoints, np.round(answer.waypoints, 2), atol=1e-9)
    assert parsed.critical_objects == answer.critical_objects
    assert (parsed.longitudinal, parsed.lateral) == (answer.longitudinal, answer.lateral)


def test_unaligned_format_does_not_match_the_bpe(qwen_tokenizer):
    """Why the Fast-dDrive format has spaces: without them the piecewise ids differ from
    the tokenization of the text."""
    schema = DrivingSchema(mask_token="|<MASK>|", explanation_budget=192)
    scaffold = compile_scaffold(schema, qwen_tokenizer, 32)
    answer = random_answer(np.random.default_rng(0), schema)
    ids, _ = encode_answer(answer, scaffold, qwen_tokenizer, schema)
    assert qwen_tokenizer.encode(qwen_tokenizer.decode(ids.tolist())) != ids.tolist()


def test_missing_mask_token_is_a_schema_error():
    plain = train_tokenizer(qwen_like_corpus(fastddrive_schema(), 60), 400, special_tokens=())
    plain.backend.add_special_tokens(list(QWEN2_5_VL_SPECIAL_TOKENS) + ["<|NULL|>"])
    with pytest.raises(SchemaError, match=r"\|<MASK>\|"):
        compile_scaffold(fastddrive_schema(), plain, 32)


def test_prompt_image_spans_follow_tokens_per_image(qwen_tokenizer):
    schema = fastddrive_schema()
    cameras = ("front_left", "front", "front_right")
    layout = render_prompt(None, qwen_tokenizer, schema, cameras, 1, 256)
    assert [s.end - s.start for s in layout.image_spans] == [256, 256, 256]
    pad = qwen_tokenizer.token_id("<|image_pad|>")
    assert int((layout.token_ids == pad).sum()) == 3 * 256
    text = qwen_tokenizer.decode(layout.token_ids.tolist())
    assert text.startswith("<|im_start|>system\n")
    assert text.count("<|vision_start|>") == 3
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
