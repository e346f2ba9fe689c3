"""`blockplan recipe run|check|status`: make a model from its recipe (recipes/*.yaml)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="run (or resume) the recipe's stages into --out")
    run.add_argument("recipe", help="a recipe file, e.g. recipes/blockplan-tiny.yaml")
    run.add_argument("--out", required=True, help="output folder: stages/, model/")
    run.add_argument(
        "--scale",
        choices=("full", "smoke"),
        default="full",
        help="full: the recipe as written; smoke: every stage shrunk to minutes (CI)",
    )
    run.add_argument("--from-stage", metavar="NAME", help="rerun this stage and all after it")
    run.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N stages at once, each once the stages it reads are done (1); their "
        "output then goes to their logs only",
    )
    check = sub.add_parser("check", help="validate the recipe and list its stages")
    check.add_argument("recipe", help="a recipe file")
    check.add_argument("--scale", choices=("full", "smoke"), default="full")
    status = sub.add_parser("status", help="where a run in --out stands, stage by stage")
    status.add_argument("recipe", help="a recipe file")
    status.add_argument("--out", required=True, help="the run's output folder")
    status.add_argument("--scale", choices=("full", "smoke"), default="full")


def run(args: argparse.Namespace) -> int:
    from blockplan.recipes import load_recipe, run_recipe, ship
    from blockplan.recipes.spec import to_argv
    from blockplan.recipes.stages import KINDS

    recipe = load_recipe(args.recipe)
    if args.action == "check":
        print(f"{recipe.path}: {recipe.name}, {len(recipe.stages)} stages, ships {recipe.ship}")
        for stage in recipe.stages:
            kind = KINDS[stage.run]
            argv = to_argv(stage.args_at(args.scale), kind.parser(), stage.name, lambda t: t)
            print(f"  {stage.name:<22} {stage.run:<12} {' '.join(argv)}")
        return 0
    out = Path(args.out)
    if args.action == "status":
        from blockplan.recipes.runner import recipe_status

        rows = recipe_status(recipe, out, args.scale)
        done = sum(r.state == "done" for r in rows)
        print(f"{recipe.name} in {out}: {done} of {len(rows)} stages done ({args.scale} scale)")
        for r in rows:
            minutes = "" if r.minutes is None else f"{r.minutes:.1f} min"
            print(f"  {r.name:<22} {r.state:<8} {minutes:>10}  {r.note}".rstrip())
        return 0
    results = run_recipe(recipe, out, args.scale, args.from_stage, jobs=args.jobs)
    model = ship(recipe, results, out, args.scale)
    print(f"model: {model} (card: {model / 'MODEL_CARD.md'})")
    return 0
