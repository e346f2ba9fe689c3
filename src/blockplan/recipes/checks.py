"""A model card's targets as checks on the measured evaluation.

A target in a recipe's `card.targets` is either a sentence (shown as written) or a mapping
that the card checks against the metrics of the evaluation stages it names:

    - text: "0 collisions in the 100 closed-loop highway + merge episodes"
      stages: [closed-loop-highway, closed-loop-merge]
      check: "model.collision_rate == 0"

`check` is a comparison over the stage's metrics JSON: a dotted name reads that key
(`rollouts_n4.ade_5s_by_scenario.roundabout`), with numbers, `+ - * /`, `min(...)`,
`max(...)`, `and`, `or` and chained comparisons; nothing else parses (the expression is read
as a syntax tree and walked, never evaluated as code). The target holds when the check holds
on every stage it names (for a `replay` stage, on every bag's metrics); with `combine: mean`
it is checked once, on the mean of the stages' numbers key by key (a mean success over ten
tasks). At `--scale smoke` the card still checks, and says the numbers are a smoke run's.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.recipes.errors import RecipeError

TARGET_KEYS = {"text", "stages", "check", "combine"}
REQUIRED_KEYS = {"text", "stages", "check"}
COMBINE = ("each", "mean")

_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_FUNCTIONS = {"min": min, "max": max}


class CheckError(Exception):
    """A check that cannot be evaluated on these metrics (a missing key, a null value)."""


@dataclass(frozen=True)
class Target:
    text: str
    stages: tuple[str, ...] = ()
    check: str | None = None  # None: a sentence, not checked
    combine: str = "each"  # each: on every stage's metrics; mean: on their key-wise mean


def parse_target(raw: Any, where: str) -> Target:
    """A `card.targets` entry; raises `RecipeError` naming `where` and the problem."""
    if isinstance(raw, str):
        return Target(raw)
    if not isinstance(raw, dict):
        raise RecipeError(f"{where}: expected a sentence or a mapping with text, stages, check")
    unknown = sorted(set(raw) - TARGET_KEYS)
    if unknown:
        raise RecipeError(f"{where}: unknown key {unknown[0]!r} (expected {sorted(TARGET_KEYS)})")
    missing = sorted(REQUIRED_KEYS - set(raw))
    if missing:
        raise RecipeError(f"{where}: missing key {missing[0]!r}")
    stages = raw["stages"]
    if isinstance(stages, str):
        stages = [stages]
    if not (isinstance(stages, list) and stages and all(isinstance(s, str) for s in stages)):
        raise RecipeError(f"{where}: stages: expected a stage name or a list of them")
    if not isinstance(raw["text"], str) or not isinstance(raw["check"], str):
        raise RecipeError(f"{where}: text and check must be strings")
    try:
        _validate(ast.parse(raw["check"], mode="eval").body)
    except (SyntaxError, RecipeError) as e:
        raise RecipeError(f"{where}: check {raw['check']!r}: {e}") from None
    combine = raw.get("combine", "each")
    if combine not in COMBINE:
        raise RecipeError(f"{where}: combine: {combine!r} is not one of {list(COMBINE)}")
    return Target(raw["text"], tuple(stages), raw["check"], combine)


def _validate(node: ast.AST) -> None:
    """Raise `RecipeError` for any node the checks do not allow."""
    if isinstance(node, ast.Compare):
        if not all(type(op) in _COMPARE for op in node.ops):
            raise RecipeError("only <, <=, >, >=, ==, != compare")
        for child in (node.left, *node.comparators):
            _validate(child)
    elif isinstance(node, ast.BoolOp):
        for child in node.values:
            _validate(child)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _ARITHMETIC:
            raise RecipeError("only + - * / are allowed")
        _validate(node.left)
        _validate(node.right)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub):
            raise RecipeError("only a minus sign is allowed before a value")
        _validate(node.operand)
    elif isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS) or node.keywords:
            raise RecipeError(f"only {sorted(_FUNCTIONS)} may be called")
        for child in node.args:
            _validate(child)
    elif isinstance(node, ast.Attribute | ast.Name):
        _dotted(node)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise RecipeError(f"{node.value!r}: only numbers are allowed")
    else:
        raise RecipeError(f"{type(node).__name__} is not allowed")


def _dotted(node: ast.AST) -> list[str]:
    """`a.b.c` as ["a", "b", "c"]."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [*_dotted(node.value), node.attr]
    raise RecipeError("a metric is a dotted name such as model.collision_rate")


class _Reader:
    """Evaluates a validated check on one metrics document; records what it read."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.read: dict[str, float] = {}

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Compare):
            left = self.value(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self.value(right_node)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BoolOp):
            want = isinstance(node.op, ast.Or)  # the value that decides: stop there
            for v in node.values:
                if bool(self.value(v)) == want:
                    return want
            return not want
        if isinstance(node, ast.BinOp):
            return _ARITHMETIC[type(node.op)](self.value(node.left), self.value(node.right))
        if isinstance(node, ast.UnaryOp):
            return -self.value(node.operand)
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](self.value(a) for a in node.args)  # type: ignore[attr-defined]
        if isinstance(node, ast.Constant):
            return node.value
        path = _dotted(node)
        value: Any = self.doc
        for key in path:
            if not isinstance(value, dict) or key not in value:
                raise CheckError(f"the metrics have no {'.'.join(path)}")
            value = value[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CheckError(f"{'.'.join(path)} is {value!r}, not a number")
        self.read[".".join(path)] = float(value)
        return value


@dataclass(frozen=True)
class Outcome:
    target: Target
    held: bool | None  # None: not checked (a sentence) or could not be checked
    detail: str  # the values read, per stage, or why it could not be checked


def check_target(target: Target, metrics: dict[str, list[tuple[str, Path]]]) -> Outcome:
    """`metrics`: stage name -> (label, metrics file) of each document it wrote. Never
    raises: a target that cannot be checked says why."""
    if target.check is None:
        return Outcome(target, None, "")
    tree = ast.parse(target.check, mode="eval").body
    docs = []
    for stage in target.stages:
        if not metrics.get(stage):
            return Outcome(target, None, f"stage {stage} wrote no metrics")
        for label, path in metrics[stage]:
            try:
                docs.append((label, json.loads(path.read_text())))
            except (OSError, ValueError) as e:
                return Outcome(target, None, f"{label}: {e}")
    if target.combine == "mean":
        docs = [(f"mean of {len(docs)}", _mean([d for _, d in docs]))]
    held, parts = True, []
    for label, doc in docs:
        reader = _Reader(doc)
        try:
            ok = bool(reader.value(tree))
        except (CheckError, TypeError, ValueError, ZeroDivisionError) as e:
            return Outcome(target, None, f"{label}: {e}")
        held = held and ok
        read = ", ".join(f"{k} = {_number(v)}" for k, v in reader.read.items())
        parts.append(f"{label}: {read}")
    return Outcome(target, held, "; ".join(parts))


def _mean(docs: list[Any]) -> Any:
    """The key-wise mean of JSON documents: numbers averaged, mappings merged on the keys
    every document has; anything else (text, lists, nulls) dropped."""
    if all(isinstance(d, dict) for d in docs):
        keys = set(docs[0]).intersection(*docs[1:])
        out = {k: _mean([d[k] for d in docs]) for k in sorted(keys)}
        return {k: v for k, v in out.items() if v is not None}
    if all(isinstance(d, int | float) and not isinstance(d, bool) for d in docs):
        return sum(docs) / len(docs)
    return None


def _number(value: float) -> str:
    return f"{value:.4g}"


def outcome_line(outcome: Outcome) -> str:
    """One Markdown list item: the verdict, the sentence, the check and what it read."""
    t = outcome.target
    if t.check is None:
        return f"- {t.text}"
    verdict = {True: "**met**", False: "**missed**", None: "**not checked**"}[outcome.held]
    return f"- {verdict}: {t.text} (`{t.check}`; {outcome.detail})"
