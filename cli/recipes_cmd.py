"""`cugraph-accel recipes`: list the built-in model shapes."""

from __future__ import annotations

from rich.table import Table

from accelerate_graph.models.recipes import DEFAULT_RECIPE, builtin_recipe_names, find_recipe

from .errors import guarded
from .output import Output


@guarded
def recipes() -> None:
    """List the built-in recipes (model shapes with random weights) usable as MODEL.

    Examples:

      cugraph-accel recipes

      cugraph-accel capture qwen2.5-0.5b          # a recipe's name as MODEL
    """
    table = Table(title="built-in recipes (random weights, fixed seed)")
    for name in ("name", "model type", "description", "buckets", "cache len"):
        table.add_column(name)
    for name in builtin_recipe_names():
        recipe = find_recipe(name)
        label = f"{name} (default)" if name == DEFAULT_RECIPE else name
        table.add_row(
            label,
            recipe.model_type,
            recipe.description,
            ",".join(map(str, recipe.defaults.buckets)),
            str(recipe.defaults.max_cache_len),
        )
    Output().show(table)
