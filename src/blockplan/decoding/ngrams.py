"""Answer n-gram drafts: proposals for the free-text slots without a draft forward.

An answer's explanation comes from a small language (a labeler's phrases, or a model's
habits), so the tokens that followed the same few tokens in the training answers are a
good guess of the next one. `AnswerNgrams` holds, for every context of 1..`order` answer
tokens seen before the slots of its `sections` in the training answers, the token that most
often came next (ties: the smallest id, so the table is a function of the answers). A
scaffold spec window in one of those sections is proposed greedily from it: each unknown
slot gets the next id of the longest context it knows, given the tokens before it (known,
or proposed just before). The verify decides as always, so the tokens never depend on the
table (greedy: AR's); a good table only saves the draft forward of each window and accepts
more per verify. Where the table knows no context the model drafts. Only free-text sections
are drafted this way (`text_sections`): the flags and meta words are decided by the scene,
which the model's own draft reads better (measured in docs/BENCHMARKS.md).

Files: `draft_ngrams.json` in a model folder (covered by its manifest), written by
`blockplan train` from the training answers; `fit` builds one from any (N, A) answers.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from blockplan.errors import UserError
from blockplan.schema.layout import Scaffold, section_of

DRAFTS_NAME = "draft_ngrams.json"
FORMAT_VERSION = 1
DEFAULT_ORDER = 3


class DraftsError(UserError, ValueError):
    """A draft_ngrams.json that cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class AnswerNgrams:
    order: int
    sections: frozenset[str]  # the scaffold sections whose windows are proposed from the table
    next_id: dict[tuple[int, ...], int]  # context (1..order ids, oldest first) -> next id

    @classmethod
    def fit(
        cls,
        answers: np.ndarray,  # (N, A) answer token ids in `scaffold`'s layout
        scaffold: Scaffold,
        sections: Iterable[str],
        order: int = DEFAULT_ORDER,
    ) -> AnswerNgrams:
        """The table of the editable slots of `sections` in `answers`."""
        answers = np.asarray(answers)
        if answers.ndim != 2 or answers.shape[1] != len(scaffold):
            raise DraftsError(f"answers of shape {answers.shape}: expected (N, {len(scaffold)})")
        wanted = set(sections)
        unknown = wanted - {s.name for s in scaffold.sections}
        if unknown or order < 1:
            raise DraftsError(f"sections {sorted(unknown)} / order {order}: not in the scaffold")
        editable = np.asarray(scaffold.is_editable)
        slots = [
            p
            for s in scaffold.sections
            if s.name in wanted
            for p in range(max(s.start, 1), s.end)
            if editable[p]
        ]
        counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for row in answers.tolist():
            for p in slots:
                for k in range(1, min(order, p) + 1):
                    counts[tuple(row[p - k : p])][row[p]] += 1
        table = {
            ctx: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for ctx, c in counts.items()
        }
        return cls(order, frozenset(wanted), table)

    def guess(self, row: np.ndarray, p: int) -> int | None:
        """The next id at answer position `p` after `row[:p]`, or None (no context known)."""
        for k in range(min(self.order, p), 0, -1):
            found = self.next_id.get(tuple(row[p - k : p].tolist()))
            if found is not None:
                return found
        return None

    # ---- files --------------------------------------------------------------------------

    def to_json(self) -> dict:
        rows = sorted(self.next_id.items())
        return {
            "format_version": FORMAT_VERSION,
            "order": self.order,
            "sections": sorted(self.sections),
            "contexts": [list(ctx) for ctx, _ in rows],
            "next": [nxt for _, nxt in rows],
        }

    @classmethod
    def from_json(
        cls, doc: object, scaffold: Scaffold, vocab_size: int, where: str
    ) -> AnswerNgrams:
        """Checked: the format, the sections (the scaffold's), every id below `vocab_size`."""
        if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
            raise DraftsError(f"{where}: not a format {FORMAT_VERSION} answer n-gram table")
        order, sections = doc.get("order"), doc.get("sections")
        contexts, nexts = doc.get("contexts"), doc.get("next")
        names = {s.name for s in scaffold.sections}
        if not (
            isinstance(order, int)
            and order >= 1
            and isinstance(sections, list)
            and set(sections) <= names
            and isinstance(contexts, list)
            and isinstance(nexts, list)
            and len(contexts) == len(nexts)
        ):
            raise DraftsError(f"{where}: bad order, sections (of {sorted(names)}) or table")
        table: dict[tuple[int, ...], int] = {}
        for ctx, nxt in zip(contexts, nexts, strict=True):
            ids = [*ctx, nxt] if isinstance(ctx, list) else None
            if (
                not ids
                or not 1 <= len(ctx) <= order
                or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids)
            ):
                raise DraftsError(
                    f"{where}: context {ctx!r} -> {nxt!r} is not ids below {vocab_size}"
                )
            table[tuple(ctx)] = nxt
        return cls(order, frozenset(sections), table)


def text_sections(scaffold: Scaffold, schema, tokenizer) -> list[str]:
    """The sections holding free text (a driving answer's explanation): the ones a table
    drafts. Flags and meta words are decided by the scene, which the model's own draft
    reads and a table cannot (measured: docs/BENCHMARKS.md)."""
    from blockplan.schema.answer import TEXT
    from blockplan.schema.scaffold import template_for

    spans = template_for(scaffold, schema, tokenizer).slots
    return [
        s.name
        for s in scaffold.sections
        if any(span.slot.kind == TEXT and s.start <= span.start < s.end for span in spans)
    ]


def draft_files(scaffold: Scaffold, answers: np.ndarray, sections: list[str]) -> dict[str, str]:
    """{DRAFTS_NAME: the JSON table of `sections` of training answers (N, A)}, for a model
    folder; {} without sections or answers."""
    if not sections or len(answers) == 0:
        return {}
    table = AnswerNgrams.fit(answers, scaffold, sections)
    return {DRAFTS_NAME: json.dumps(table.to_json(), separators=(",", ":")) + "\n"}


def read_drafts(
    folder: str | Path | None, scaffold: Scaffold, vocab_size: int
) -> AnswerNgrams | None:
    """The folder's `draft_ngrams.json`, or None when it has none."""
    if folder is None or not (Path(folder) / DRAFTS_NAME).is_file():
        return None
    path = Path(folder) / DRAFTS_NAME
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftsError(f"{path}: cannot read it ({e})") from e
    return AnswerNgrams.from_json(doc, scaffold, vocab_size, str(path))


def ngram_proposal(ngrams: AnswerNgrams, model_draft):
    """Scaffold spec's proposal with a table: windows of one row in the table's sections are
    filled from it (no forward) as far as it knows a context; the others, and a window whose
    first unknown slot it cannot guess, are drafted by `model_draft`."""

    def propose(ctx, state, w: int, e: int) -> torch.Tensor:
        if state.ids.shape[0] != 1 or section_of(ctx.scaffold, w) not in ngrams.sections:
            return model_draft(ctx, state, w, e)
        row = state.ids[0].copy()  # (A,) numpy
        known = state.known[0]
        guessed = False
        for p in range(w, e):
            if known[p]:
                continue
            token = ngrams.guess(row, p)
            if token is None:
                if not guessed:
                    return model_draft(ctx, state, w, e)
                break  # the verify stops at the first slot it cannot guess (a mask id)
            row[p], guessed = token, True
        return torch.from_numpy(row[None, w:e].copy())

    return propose
