"""The robot prompt's instruction: the shipped tokenizer is byte-level BPE without an unknown
token, so every word of every instruction survives tokenization; what can lose words is the
instruction budget, and two tasks cut to the same prompt are an error."""

from __future__ import annotations

import pytest

from blockplan.schema import SchemaError, default_tokenizer
from blockplan.schema.action import ActionSchema
from blockplan.schema.action.prompt import check_instructions
from blockplan.sim.manipulation import MT10, TASKS


def _schema(budget: int) -> ActionSchema:
    tokenizer = default_tokenizer()
    return ActionSchema(
        horizon=4,
        action_dim=4,
        num_bins=32,
        proprio_dim=2,
        instruction_budget=budget,
        bin_token_offset=tokenizer.vocab_size,
    )


def test_every_mt10_instruction_survives_the_tokenizer_word_for_word():
    tokenizer = default_tokenizer()
    for text in [TASKS[t].instruction for t in MT10] + ["zyxwq the ☃ unseen-word"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_the_ten_instructions_fit_a_budget_of_32_and_a_cut_is_reported():
    tokenizer = default_tokenizer()
    texts = [TASKS[t].instruction for t in MT10]
    assert check_instructions(texts, tokenizer, _schema(32)) == {}
    cut = check_instructions(texts, tokenizer, _schema(16))  # the tiny model's budget
    assert TASKS["pick-place"].instruction in cut and all(n > 16 for n in cut.values())


def test_two_instructions_cut_to_the_same_prompt_are_an_error():
    tokenizer = default_tokenizer()
    texts = ["open the door slowly", "open the door quickly"]
    with pytest.raises(SchemaError, match="instruction budget of at least"):
        check_instructions(texts, tokenizer, _schema(4))
    assert check_instructions(texts, tokenizer, _schema(11)) == {}
