"""A recipe: the stages that make a shipped model, as data (`recipes/*.yaml`).

A recipe file names the model, says which stage's output ships, and lists the stages in
order. Each stage runs one `blockplan` command (or one of the recipe's own operations, such
as `average`) with arguments written as the command's long options without the dashes:

    stages:
      - name: base-data
        run: dataset
        args: {scenario: [highway, merge], episodes: 100, duration: 20, no-export: true}
        smoke: {episodes: 2}            # what `--scale smoke` changes
      - name: pre
        run: train
        args: {data: "{base-data}", steps: 4000, arch: reference}

`{name}` in a value is the main output of an earlier stage (a data set folder, a model
folder, a metrics file); `{name:PATH}` is PATH inside that stage's folder (a training run's
`teacher`). The file is checked before anything runs, with the command's own
argument parser: an unknown key, an option the command does not have, a value of the wrong
type or a reference to a later stage is an error naming the file, the stage and the key.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from blockplan.recipes.checks import parse_target
from blockplan.recipes.errors import RecipeError
from blockplan.recipes.stages import EVALUATIONS, KINDS

SCALES = ("full", "smoke")
# `{stage}`: that stage's main output; `{stage:PATH}`: PATH inside that stage's folder.
REFERENCE = re.compile(r"\{([a-z0-9][a-z0-9_-]*)(?::([A-Za-z0-9_./-]+))?\}")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

RECIPE_KEYS = {"name", "description", "embodiment", "ship", "stages", "card"}
STAGE_KEYS = {"name", "run", "args", "smoke", "about"}
CARD_KEYS = {"title", "summary", "targets", "limits"}


@dataclass(frozen=True)
class Stage:
    name: str
    run: str  # a stage kind: a blockplan command or a recipe operation (stages.KINDS)
    args: dict[str, Any]
    smoke: dict[str, Any] = field(default_factory=dict)
    about: str = ""

    def args_at(self, scale: str) -> dict[str, Any]:
        """The stage's arguments at `scale`: `smoke` overrides `args` key by key; a `null`
        drops the key (in `args`, where a YAML merge brought in a key this stage lacks)."""
        merged = {k: v for k, v in self.args.items() if v is not None}
        if scale == "smoke":
            for key, value in self.smoke.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        return merged

    def references(self, scale: str) -> list[str]:
        """The earlier stages whose outputs this stage reads, in order of first use."""
        found: list[str] = []
        for value in _strings(self.args_at(scale)):
            for name, _ in REFERENCE.findall(value):
                if name not in found:
                    found.append(name)
        return found


@dataclass(frozen=True)
class Recipe:
    path: Path
    name: str
    description: str
    embodiment: str
    ship: str  # the stage whose model folder ships
    stages: tuple[Stage, ...]
    card: dict[str, Any]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise RecipeError(f"{self.path}: no stage named {name!r} (stages: {self.names()})")

    def names(self) -> str:
        return ", ".join(s.name for s in self.stages)


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file (both scales); raises RecipeError naming the key."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise RecipeError(f"cannot read recipe {path}: {e}") from e
    except yaml.YAMLError as e:
        problem = " ".join(str(e).split())
        raise RecipeError(f"{path}: not valid YAML: {problem}") from e
    recipe = parse_recipe(doc, path)
    for scale in SCALES:
        check_stages(recipe, scale)
    return recipe


def parse_recipe(doc: Any, path: Path) -> Recipe:
    where = str(path)
    if not isinstance(doc, dict):
        raise RecipeError(f"{where}: expected a mapping with {sorted(RECIPE_KEYS)}")
    _no_unknown(doc, RECIPE_KEYS, where)
    for key in ("name", "ship", "stages"):
        if key not in doc:
            raise RecipeError(f"{where}: missing key {key!r}")
    name = _text(doc["name"], f"{where}: name")
    embodiment = doc.get("embodiment", "vehicle")
    if embodiment not in ("vehicle", "robot"):
        raise RecipeError(f"{where}: embodiment: {embodiment!r} is not vehicle or robot")
    raw_stages = doc["stages"]
    if not isinstance(raw_stages, list) or not raw_stages:
        raise RecipeError(f"{where}: stages: expected a non-empty list of stages")
    stages: list[Stage] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_stages):
        stage = _parse_stage(raw, f"{where}: stages[{i}]")
        if stage.name in seen:
            raise RecipeError(f"{where}: stages[{i}]: name {stage.name!r} is used twice")
        seen.add(stage.name)
        stages.append(stage)
    ship = _text(doc["ship"], f"{where}: ship")
    if ship not in seen:
        raise RecipeError(f"{where}: ship: {ship!r} is not a stage")
    card = doc.get("card") or {}
    if not isinstance(card, dict):
        raise RecipeError(f"{where}: card: expected a mapping")
    _no_unknown(card, CARD_KEYS, f"{where}: card")
    if "limits" in card and not (
        isinstance(card["limits"], list) and all(isinstance(x, str) for x in card["limits"])
    ):
        raise RecipeError(f"{where}: card.limits: expected a list of strings")
    targets = card.get("targets", [])
    if not isinstance(targets, list):
        raise RecipeError(f"{where}: card.targets: expected a list")
    evaluations = {s.name for s in stages if s.run in EVALUATIONS}
    for i, raw in enumerate(targets):
        target = parse_target(raw, f"{where}: card.targets[{i}]")
        for checked in target.stages:
            if checked not in evaluations:
                raise RecipeError(
                    f"{where}: card.targets[{i}]: stages: {checked!r} is not an evaluation "
                    f"stage of this recipe (one of {sorted(evaluations)})"
                )
    return Recipe(
        path=path,
        name=name,
        description=str(doc.get("description", "")).strip(),
        embodiment=embodiment,
        ship=ship,
        stages=tuple(stages),
        card=card,
    )


def _parse_stage(raw: Any, where: str) -> Stage:
    if not isinstance(raw, dict):
        raise RecipeError(f"{where}: expected a mapping with name, run and args")
    _no_unknown(raw, STAGE_KEYS, where)
    for key in ("name", "run"):
        if key not in raw:
            raise RecipeError(f"{where}: missing key {key!r}")
    name = _text(raw["name"], f"{where}.name")
    if not NAME.match(name):
        raise RecipeError(f"{where}.name: {name!r}: use lower-case letters, digits, - and _")
    where = f"{where} ({name})"
    run = _text(raw["run"], f"{where}.run")
    if run not in KINDS:
        raise RecipeError(f"{where}.run: {run!r} is not one of {', '.join(sorted(KINDS))}")
    args = raw.get("args") or {}
    smoke = raw.get("smoke") or {}
    for key, value in (("args", args), ("smoke", smoke)):
        if not isinstance(value, dict):
            raise RecipeError(f"{where}.{key}: expected a mapping of option: value")
        for option in value:
            if not isinstance(option, str) or not option or option.startswith("-"):
                raise RecipeError(f"{where}.{key}: {option!r}: write an option without its dashes")
    return Stage(
        name=name, run=run, args=dict(args), smoke=dict(smoke), about=str(raw.get("about", ""))
    )


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(f"{where}: expected a non-empty string, not {value!r}")
    return value.strip()


def _no_unknown(doc: dict, known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise RecipeError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )


def check_stages(recipe: Recipe, scale: str) -> None:
    """Every stage's arguments at `scale` parse with its command's parser, and every
    reference names an earlier stage whose kind has an output of the right sort."""
    earlier: dict[str, Stage] = {}
    for i, stage in enumerate(recipe.stages):
        where = f"{recipe.path}: stages[{i}] ({stage.name})"
        for ref in stage.references(scale):
            if ref not in earlier:
                later = ref in {s.name for s in recipe.stages}
                why = "a later stage" if later else "no stage of this recipe"
                raise RecipeError(f"{where}: {{{ref}}} names {why}")
        kind = KINDS[stage.run]
        argv = to_argv(
            stage.args_at(scale),
            kind.parser(),
            where,
            resolve=lambda text: REFERENCE.sub(lambda m: f"STAGE_{m.group(1)}", text),
        )
        kind.parse(argv, where)
        earlier[stage.name] = stage
    ship = recipe.stage(recipe.ship)
    if not KINDS[ship.run].makes_model:
        raise RecipeError(f"{recipe.path}: ship: stage {ship.name!r} does not make a model")


def to_argv(
    args: dict[str, Any], parser: argparse.ArgumentParser, where: str, resolve
) -> list[str]:
    """The command line of `args` for `parser`: `key: true` is a switch, a list is repeated
    values (nargs) or a repeated option (append); `resolve` maps every string value."""
    options = {s: a for a in parser._actions for s in a.option_strings}
    positional = {a.dest: a for a in parser._actions if not a.option_strings}
    argv: list[str] = []
    tail: list[str] = []  # positional arguments (a replay's bags) go last
    for key, value in args.items():
        flag = f"--{key}"
        action = options.get(flag)
        if action is None and key in positional:
            values = value if isinstance(value, list) else [value]
            tail += [resolve(str(v)) for v in values]
            continue
        if action is None:
            known = sorted(
                s[2:]
                for s, a in options.items()
                if s.startswith("--") and s != "--help" and a.help != argparse.SUPPRESS
            )
            raise RecipeError(
                f"{where}.args.{key}: not an option of `{parser.prog}` "
                f"(options: {', '.join(known)})"
            )
        switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        if switch:
            if not isinstance(value, bool):
                raise RecipeError(f"{where}.args.{key}: a switch: write true or false")
            if value:
                argv.append(flag)
            continue
        if isinstance(value, dict) and action.metavar == "NAME=VALUE":
            for name, item in value.items():  # `set: {name: value}`: one --set each
                if item is not None:
                    argv += [flag, f"{name}={_setting(item, resolve)}"]
            continue
        if isinstance(value, (bool, dict)) or value is None:
            raise RecipeError(f"{where}.args.{key}: {value!r} is not a value for {flag}")
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise RecipeError(f"{where}.args.{key}: an empty list")
        if any(isinstance(v, (list, dict, bool)) or v is None for v in values):
            raise RecipeError(f"{where}.args.{key}: {value!r}: expected plain values")
        texts = [resolve(str(v)) for v in values]
        if isinstance(action, argparse._AppendAction):
            for text in texts:
                argv += [flag, text]
        elif len(texts) > 1 and action.nargs in (None, "?"):
            raise RecipeError(f"{where}.args.{key}: {flag} takes one value, not a list")
        else:
            argv += [flag, *texts]
    return argv + tail


def _setting(value: Any, resolve) -> str:
    """A `--set` value: YAML's spelling of switches and lists (`true`, `[a, b]`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(resolve(str(v)) for v in value) + "]"
    return resolve(str(value))
