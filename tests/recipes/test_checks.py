"""A card's targets as checks on the measured metrics (recipes/checks.py)."""

import json

import pytest

from blockplan.recipes.checks import Target, check_target, outcome_line, parse_target
from blockplan.recipes.errors import RecipeError


def _metrics(tmp_path, name, doc):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return [(name, path)]


def test_a_target_holds_when_its_check_holds_on_every_stage_it_names(tmp_path):
    target = parse_target(
        {
            "text": "0 collisions on the validation range",
            "stages": ["highway", "merge"],
            "check": "model.collision_rate == 0 and model.episodes >= 50",
        },
        "card.targets[0]",
    )
    metrics = {
        "highway": _metrics(
            tmp_path, "highway", {"model": {"collision_rate": 0.0, "episodes": 50}}
        ),
        "merge": _metrics(tmp_path, "merge", {"model": {"collision_rate": 0.0, "episodes": 50}}),
    }
    outcome = check_target(target, metrics)
    assert outcome.held is True
    assert "highway: model.collision_rate = 0, model.episodes = 50" in outcome.detail
    assert outcome_line(outcome).startswith("- **met**: 0 collisions on the validation range (")

    metrics["merge"] = _metrics(
        tmp_path, "merge", {"model": {"collision_rate": 0.02, "episodes": 50}}
    )
    outcome = check_target(target, metrics)
    assert outcome.held is False and "merge: model.collision_rate = 0.02" in outcome.detail
    assert outcome_line(outcome).startswith("- **missed**: ")


def test_arithmetic_min_and_chained_comparisons():
    doc = {
        "rollouts_n4": {"ade_5s": 0.9, "by": {"roundabout": 1.2}},
        "blind_best": {"ade_5s": 1.1, "by": {"roundabout": 1.77}},
        "model": {"failure_rate": 0.4, "episodes": 20},
        "expert": {"failure_rate": 0.35},
    }

    def holds(check, tmp_path_doc=doc):
        import ast

        from blockplan.recipes.checks import _Reader

        parse_target({"text": "t", "stages": ["s"], "check": check}, "here")
        return _Reader(tmp_path_doc).value(ast.parse(check, mode="eval").body)

    assert holds("rollouts_n4.ade_5s <= 0.9 * blind_best.ade_5s")
    assert holds("rollouts_n4.by.roundabout <= 0.9 * min(blind_best.by.roundabout, 5)")
    assert holds("model.failure_rate * model.episodes <= expert.failure_rate * model.episodes + 2")
    assert not holds("0 < rollouts_n4.ade_5s < 0.5")
    assert holds("-rollouts_n4.ade_5s < 0 or 1 / 0")  # `or` stops at the first true value


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"text": "t", "stages": ["s"], "check": "__import__('os').system('x')"}, "called"),
        ({"text": "t", "stages": ["s"], "check": "model.run()"}, "called"),
        ({"text": "t", "stages": ["s"], "check": "model.x ** 2 < 1"}, r"\+ - \* /"),
        ({"text": "t", "stages": ["s"], "check": "model.name == 'x'"}, "only numbers"),
        ({"text": "t", "stages": ["s"], "check": "[1][0] < 2"}, "not allowed"),
        ({"text": "t", "stages": ["s"], "check": "model.x <"}, "check"),
        ({"text": "t", "stages": ["s"], "check": "model.x in (1, 2)"}, "compare"),
        ({"text": "t", "stages": [], "check": "1 < 2"}, "stages"),
        ({"text": "t", "check": "1 < 2"}, "missing key 'stages'"),
        ({"text": "t", "stages": ["s"], "check": "1 < 2", "why": "x"}, "unknown key 'why'"),
        (3, "a sentence or a mapping"),
    ],
)
def test_a_bad_target_is_an_error_naming_where(raw, message):
    with pytest.raises(RecipeError, match=message) as error:
        parse_target(raw, "recipe.yaml: card.targets[1]")
    assert "card.targets[1]" in str(error.value)


def test_a_target_that_cannot_be_checked_says_why_and_never_raises(tmp_path):
    target = Target("t", ("open-loop",), "rollouts_n4.ade_5s <= blind_best.ade_5s")
    assert check_target(target, {}).held is None
    assert "wrote no metrics" in check_target(target, {}).detail
    metrics = {"open-loop": _metrics(tmp_path, "open-loop", {"rollouts_n4": {"ade_5s": 1.0}})}
    outcome = check_target(target, metrics)
    assert outcome.held is None and "no blind_best.ade_5s" in outcome.detail
    assert outcome_line(outcome).startswith("- **not checked**: t (")
    nulls = {
        "open-loop": _metrics(
            tmp_path, "n", {"rollouts_n4": {"ade_5s": None}, "blind_best": {"ade_5s": 1}}
        )
    }
    assert "is None, not a number" in check_target(target, nulls).detail
    assert outcome_line(check_target(Target("a sentence"), {})) == "- a sentence"
    empty = Target("t", ("open-loop",), "min() < 1")  # parses; fails only on evaluation
    assert check_target(empty, metrics).held is None


def test_combine_mean_checks_once_on_the_mean_of_the_stages(tmp_path):
    """A mean success over tasks: `combine: mean` averages the stages' numbers key by key."""
    target = parse_target(
        {
            "text": "mean success >= 80 % of the expert's",
            "stages": ["reach", "push"],
            "check": "model.success_rate >= 0.8 * expert.success_rate",
            "combine": "mean",
        },
        "here",
    )
    metrics = {
        "reach": _metrics(
            tmp_path, "reach", {"model": {"success_rate": 1.0}, "expert": {"success_rate": 1.0}}
        ),
        "push": _metrics(
            tmp_path,
            "push",
            {"model": {"success_rate": 0.6, "note": "x"}, "expert": {"success_rate": 0.9}},
        ),
    }
    outcome = check_target(target, metrics)
    assert outcome.held is True  # 0.8 >= 0.8 * 0.95, though push alone is 0.6 < 0.72
    assert outcome.detail == "mean of 2: model.success_rate = 0.8, expert.success_rate = 0.95"
    each = Target(target.text, target.stages, target.check)
    assert check_target(each, metrics).held is False
    with pytest.raises(RecipeError, match="combine: 'median'"):
        parse_target({"text": "t", "stages": ["s"], "check": "1 < 2", "combine": "median"}, "h")
