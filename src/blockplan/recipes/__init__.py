"""Recipes: the stages that make a shipped model, as validated data, run resumably.

`load_recipe` reads and checks a `recipes/*.yaml` file; `run_recipe` runs its stages into an
output folder; `ship` copies the shipped stage's model folder to `OUT/model` with its
generated MODEL_CARD.md and a manifest over every file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from blockplan.recipes.runner import StageResult, run_recipe
from blockplan.recipes.spec import Recipe, RecipeError, load_recipe

CARD_NAME = "MODEL_CARD.md"

__all__ = ["CARD_NAME", "Recipe", "RecipeError", "StageResult", "load_recipe", "run_recipe", "ship"]


def ship(recipe: Recipe, results: list[StageResult], out: Path, scale: str) -> Path:
    """OUT/model: the shipped stage's model folder, its card, and a new manifest."""
    from blockplan.model.weights import verify_manifest, write_manifest
    from blockplan.recipes.card import write_card

    source = next(r.output for r in results if r.stage.name == recipe.ship)
    verify_manifest(source)
    model = out / "model"
    if model.exists():
        shutil.rmtree(model)
    shutil.copytree(source, model)
    (model / CARD_NAME).write_text(write_card(recipe, results, out, scale))
    write_manifest(model)
    return model
