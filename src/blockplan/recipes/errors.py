"""The recipes' error: a recipe file that cannot run."""

from blockplan.errors import UserError


class RecipeError(UserError, ValueError):
    """A recipe file that cannot run: unknown keys, bad values, a missing stage."""
