"""Recipe files are checked before anything runs: every mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from blockplan.recipes import RecipeError, load_recipe
from blockplan.recipes.spec import check_stages

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "recipes").glob("*.yaml"))


def test_every_shipped_model_has_a_recipe():
    names = {p.stem for p in SHIPPED}
    models = {p.name for p in (REPO / "models").iterdir() if p.is_dir()}
    assert models <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_the_shipped_recipes_check_at_both_scales(path):
    recipe = load_recipe(path)  # checks full and smoke
    assert recipe.name == path.stem
    assert recipe.ship in {s.name for s in recipe.stages}
    assert any(s.run in ("eval", "closed-loop", "replay") for s in recipe.stages)


def _write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _recipe(**changes):
    doc = {
        "name": "r",
        "ship": "soup",
        "stages": [
            {"name": "soup", "run": "average", "args": {"models": ["a", "b"]}},
            {"name": "ol", "run": "eval", "args": {"data": "D", "model": "{soup}"}},
        ],
    }
    doc.update(changes)
    return doc


def _stage(run, args, name="s", **more):
    return {"name": name, "run": run, "args": args, **more}


BAD = {
    "unknown top key": (_recipe(colour="red"), "unknown key 'colour'"),
    "no stages": (_recipe(stages=[]), "stages: expected a non-empty list"),
    "ship names nothing": (_recipe(ship="nope"), "ship: 'nope' is not a stage"),
    "unknown stage key": (
        _recipe(stages=[_stage("average", {"models": ["a", "b"]}, name="soup", when="now")]),
        "stages[0]: unknown key 'when'",
    ),
    "unknown kind": (
        _recipe(stages=[_stage("bake", {}, name="soup")]),
        "stages[0] (soup).run: 'bake' is not one of",
    ),
    "unknown option": (
        _recipe(stages=[_stage("train", {"data": "D", "steps": 3, "stepz": 4}, name="soup")]),
        "stages[0] (soup).args.stepz: not an option of `blockplan train`",
    ),
    "bad value type": (
        _recipe(stages=[_stage("train", {"data": "D", "steps": "many"}, name="soup")]),
        "stages[0] (soup): blockplan train: argument --steps: invalid int value: 'many'",
    ),
    "bad choice": (
        _recipe(stages=[_stage("train", {"data": "D", "steps": 3, "arch": "huge"}, name="soup")]),
        "argument --arch: invalid choice: 'huge'",
    ),
    "missing required option": (
        _recipe(stages=[_stage("train", {"data": "D"}, name="soup")]),
        "the following arguments are required: --steps",
    ),
    "switch with a value": (
        _recipe(
            stages=[_stage("train", {"data": "D", "steps": 3, "ego-lead": "yes"}, name="soup")]
        ),
        "args.ego-lead: a switch: write true or false",
    ),
    "runner's option": (
        _recipe(stages=[_stage("train", {"data": "D", "steps": 3, "out": "X"}, name="soup")]),
        "args.out: set by the recipe runner",
    ),
    "dashes": (
        _recipe(stages=[_stage("average", {"--models": ["a"]}, name="soup")]),
        "'--models': write an option without its dashes",
    ),
    "later stage": (
        _recipe(
            stages=[
                _stage("eval", {"data": "D", "model": "{soup}"}, name="ol"),
                _stage("average", {"models": ["a", "b"]}, name="soup"),
            ]
        ),
        "stages[0] (ol): {soup} names a later stage",
    ),
    "no such stage": (
        _recipe(stages=[_stage("average", {"models": ["{gone}", "b"]}, name="soup")]),
        "{gone} names no stage of this recipe",
    ),
    "smoke key": (
        _recipe(stages=[_stage("average", {"models": ["a", "b"]}, name="soup", smoke={"x": 1})]),
        "args.x: not an option",
    ),
    "ship is no model": (
        _recipe(ship="ol"),
        "ship: stage 'ol' does not make a model",
    ),
    "a target checks a stage that is no evaluation": (
        _recipe(card={"targets": [{"text": "t", "stages": ["soup"], "check": "a.b < 1"}]}),
        "card.targets[0]: stages: 'soup' is not an evaluation stage",
    ),
    "a target's check is not a comparison of metrics": (
        _recipe(card={"targets": ["fine", {"text": "t", "stages": ["ol"], "check": "open()"}]}),
        "card.targets[1]: check 'open()': only ['max', 'min'] may be called",
    ),
    "twice the same name": (
        _recipe(stages=[_stage("average", {"models": ["a", "b"]}, name="soup")] * 2),
        "name 'soup' is used twice",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_recipe_is_one_clear_error(tmp_path, case):
    doc, message = BAD[case]
    path = _write(tmp_path, doc)
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    text = str(error.value)
    assert message in text
    assert str(path) in text
    assert "\n" not in text


def test_not_yaml_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("stages: [\n")
    with pytest.raises(RecipeError, match="r.yaml: not valid YAML"):
        load_recipe(path)


def test_smoke_overrides_and_null_drops_a_key(tmp_path):
    stage = _stage("train", {"data": "D", "steps": 100, "seed": 3}, name="soup")
    stage["smoke"] = {"steps": 2, "seed": None}
    recipe = load_recipe(_write(tmp_path, _recipe(stages=[stage])))
    assert recipe.stages[0].args_at("full") == {"data": "D", "steps": 100, "seed": 3}
    assert recipe.stages[0].args_at("smoke") == {"data": "D", "steps": 2}
    check_stages(recipe, "smoke")


def test_a_recipe_setting_is_checked_like_the_option(tmp_path):
    stage = _stage("train", {"data": "D", "steps": 3, "set": {"egotokens": 4}}, name="soup")
    with pytest.raises(RecipeError, match="'egotokens' is not a setting"):
        load_recipe(_write(tmp_path, _recipe(stages=[stage])))
    stage["args"]["set"] = {"ego-tokens": 4, "ego-lead": True, "cameras": ["front", "rear"]}
    load_recipe(_write(tmp_path, _recipe(stages=[stage])))
