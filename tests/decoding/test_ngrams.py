"""Answer n-gram drafts (decoding/ngrams.py): the table, its file, and that decoding with it
keeps every strategy's tokens while the explanation needs fewer forwards."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from blockplan.config import PlannerConfig
from blockplan.decoding.ngrams import (
    DRAFTS_NAME,
    AnswerNgrams,
    DraftsError,
    draft_files,
    read_drafts,
    text_sections,
)
from blockplan.model.weights import WeightsError
from blockplan.planner.planner import Planner
from blockplan.planner.synthetic import synthetic_observation

SHIPPED = "models/blockplan-tiny"


@pytest.fixture(scope="module")
def shipped() -> Planner:
    return Planner.from_folder(SHIPPED)


def test_the_table_keeps_the_most_frequent_next_token_and_backs_off() -> None:
    class Section:
        def __init__(self, name, start, end):
            self.name, self.start, self.end, self.num_editable = name, start, end, end - start

    class Scaffold:
        sections = (Section("text", 0, 6), Section("digits", 6, 8))
        is_editable = np.array([False, True, True, True, True, True, True, True])

        def __len__(self) -> int:
            return 8

    answers = np.array(
        [
            [9, 1, 2, 3, 4, 5, 7, 7],
            [9, 1, 2, 3, 4, 5, 7, 7],
            [9, 1, 2, 6, 4, 5, 7, 7],
            [9, 8, 2, 6, 0, 0, 7, 7],
        ]
    )
    table = AnswerNgrams.fit(answers, Scaffold(), ["text"], order=2)
    row = np.array([9, 1, 2, 0, 0, 0, 0, 0])
    assert table.guess(row, 3) == 3  # after (1, 2): 3 twice, 6 once
    assert table.guess(np.array([9, 8, 2, 0, 0, 0, 0, 0]), 3) == 6  # after (8, 2): 6
    assert table.guess(np.array([5, 5, 2, 0, 0, 0, 0, 0]), 3) == 3  # backs off to (2,): 3 vs 6
    assert table.guess(np.array([5, 5, 5, 5, 5, 5, 7, 7]), 7) is None  # no such context
    assert all(5 not in ctx or nxt != 7 for ctx, nxt in table.next_id.items())  # digits: none
    assert AnswerNgrams.from_json(table.to_json(), Scaffold(), 10, "t") == table
    with pytest.raises(DraftsError, match="ids below 5"):
        AnswerNgrams.from_json(table.to_json(), Scaffold(), 5, "t")
    bad = {**table.to_json(), "sections": ["nope"]}
    with pytest.raises(DraftsError, match="sections"):
        AnswerNgrams.from_json(bad, Scaffold(), 10, "t")
    with pytest.raises(DraftsError, match="format 1"):
        AnswerNgrams.from_json({"format_version": 9}, Scaffold(), 10, "t")


def test_the_shipped_table_drafts_the_explanation_only(shipped) -> None:
    assert shipped.drafts is not None and shipped.drafts.sections == {"explanation"}
    assert text_sections(shipped.scaffold, shipped.schema, shipped.tokenizer) == ["explanation"]
    assert (
        draft_files(shipped.scaffold, np.zeros((0, len(shipped.scaffold))), ["explanation"]) == {}
    )


@pytest.mark.parametrize("strategy", ["scaffold_spec", "rollouts"])
def test_the_same_tokens_with_and_without_the_table_and_fewer_forwards(shipped, strategy) -> None:
    """Cold plans (no previous answer) and hinted ones, on the shipped model: the table
    changes how many forwards the explanation takes, never a token."""
    off = shipped.sibling(shipped.config.with_params({"decoding.ngram_drafts": False}))
    ar = shipped.sibling(shipped.config)
    with_table = without = 0
    for seed in range(4):
        obs = synthetic_observation(shipped.config, seed, schema=shipped.schema)
        for hinted in (False, True):
            shipped.previous_answer = off.previous_answer = None
            if hinted:  # the previous plan's answer as the first draft, then the table
                other = synthetic_observation(shipped.config, seed + 10, schema=shipped.schema)
                shipped.decode(other, strategy)
                off.decode(other, strategy)
            a = shipped.decode(obs, strategy).result
            b = off.decode(obs, strategy).result
            assert np.array_equal(a.tokens, b.tokens), (seed, hinted)
            with_table, without = with_table + a.num_forwards, without + b.num_forwards
        if strategy == "scaffold_spec":
            ar.previous_answer = None
            assert np.array_equal(ar.decode(obs, "ar").result.tokens, a.tokens)
    assert with_table < without


def test_a_table_that_knows_no_context_changes_nothing(shipped) -> None:
    empty = AnswerNgrams(3, frozenset({"explanation"}), {})
    off = shipped.sibling(shipped.config.with_params({"decoding.ngram_drafts": False}))
    blank = shipped.sibling(shipped.config)
    blank.drafts = empty
    obs = synthetic_observation(shipped.config, 1, schema=shipped.schema)
    a, b = blank.decode(obs, "scaffold_spec").result, off.decode(obs, "scaffold_spec").result
    assert np.array_equal(a.tokens, b.tokens) and a.num_forwards == b.num_forwards


def test_the_table_file_is_checked_with_the_folder(tmp_path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(SHIPPED, folder)
    path = folder / DRAFTS_NAME
    doc = json.loads(path.read_text())
    doc["next"][0] = (doc["next"][0] + 1) % 7  # a tampered table fails the manifest
    path.write_text(json.dumps(doc))
    with pytest.raises(WeightsError, match=f"{DRAFTS_NAME}: sha256"):
        Planner.from_folder(folder, PlannerConfig())
    planner = Planner.from_folder(SHIPPED)
    path.write_text("{not json")  # read_drafts' own check, for a folder loaded without one
    with pytest.raises(DraftsError, match="cannot read it"):
        read_drafts(folder, planner.scaffold, 768)
    path.unlink()
    assert read_drafts(folder, planner.scaffold, 768) is None
