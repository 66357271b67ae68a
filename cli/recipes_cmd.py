"""`cugraph-accel recipes`: list the built-in model shapes."""

from __future__ import annotations

from rich.table import Table

from accelerate_graph.models.recipes import DEFAULT_RECIPE, builtin_recipe_names, find_recipe

from .errors import guarded
from .options import ForceFlag, JsonOpt
from .output import Output


@guarded
def recipes(json: JsonOpt = None, force: ForceFlag = False) -> None:
    """List the built-in recipes (model shapes with random weights) usable as MODEL.

    Examples:

      cugraph-accel recipes

      cugraph-accel recipes --json -              # names, types and defaults as JSON

      cugraph-accel capture qwen2.5-0.5b          # a recipe's name as MODEL
    """

    out = Output(json)
    out.check_json_writable(force)
    table = Table(title="built-in recipes (random weights, fixed seed)")
    for name in ("name", "model type", "description", "buckets", "cache len"):
        table.add_column(name)
    listed = []
    for name in builtin_recipe_names():
        recipe = find_recipe(name)
        label = f"{name} (default)" if name == DEFAULT_RECIPE else name
        buckets, cache_len = list(recipe.defaults.buckets), recipe.defaults.max_cache_len
        table.add_row(label, recipe.model_type, recipe.description, ",".join(map(str, buckets)), str(cache_len))
        listed.append({"name": name, "model_type": recipe.model_type, "description": recipe.description,
                       "buckets": buckets, "max_cache_len": cache_len, "default": name == DEFAULT_RECIPE})  # fmt: skip
    out.show(table)
    out.emit_json({"recipes": listed})
