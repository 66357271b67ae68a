"""Built-in recipes: a model shape (random weights, fixed seed) plus capture defaults, from YAML."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from accelerate_graph.common.errors import RecipeError, first_line

RECIPE_DIR = Path(__file__).resolve().parents[2] / "recipes"
DEFAULT_RECIPE = "tiny"


@dataclass(frozen=True)
class RecipeDefaults:
    buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32)
    max_cache_len: int = 1024
    prompt_len: int = 128

    def __post_init__(self) -> None:
        if not self.buckets or any(not isinstance(b, int) or b < 1 for b in self.buckets):
            raise RecipeError(f"recipe defaults.buckets {list(self.buckets)} must be whole numbers >= 1.")
        for key in ("max_cache_len", "prompt_len"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise RecipeError(f"recipe defaults.{key} must be a whole number >= 1, got {value!r}.")
        if self.prompt_len >= self.max_cache_len:
            raise RecipeError("recipe defaults.prompt_len must be smaller than defaults.max_cache_len.")


@dataclass(frozen=True)
class Recipe:
    name: str
    model_type: str
    config: dict
    description: str = ""
    seed: int = 0
    defaults: RecipeDefaults = field(default_factory=RecipeDefaults)
    source: str = ""  # the file it came from

    def __post_init__(self) -> None:
        for key, kind in (("name", str), ("model_type", str), ("config", dict), ("description", str), ("seed", int)):
            if not isinstance(getattr(self, key), kind):
                article = "an" if kind.__name__[0] in "aeiou" else "a"
                raise RecipeError(
                    f"recipe key {key!r} must be {article} {kind.__name__}, got {type(getattr(self, key)).__name__}."
                )


def _checked_keys(data: dict, allowed: type, where: str) -> dict:
    names = {f.name for f in fields(allowed)} - {"source"}
    unknown = sorted(set(data) - names)
    if unknown:
        raise RecipeError(f"{where}: unknown key {unknown[0]!r}.", f"Allowed keys: {', '.join(sorted(names))}.")
    return data


def load_recipe_file(path: Path) -> Recipe:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RecipeError(f"cannot read recipe {path}: {first_line(err)}.") from err
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a YAML mapping of keys to values.")
    _checked_keys(data, Recipe, f"recipe {path}")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise RecipeError(f"recipe {path}: 'defaults' must be a mapping.")
    _checked_keys(defaults, RecipeDefaults, f"recipe {path} defaults")
    if "buckets" in defaults:
        buckets = defaults["buckets"]
        if not isinstance(buckets, list) or any(type(b) is not int or b < 1 for b in buckets):
            raise RecipeError(f"recipe {path}: defaults.buckets must be a list of whole numbers >= 1.")
        defaults["buckets"] = tuple(sorted(buckets))
    missing = [key for key in ("name", "model_type", "config") if key not in data]
    if missing:
        raise RecipeError(f"recipe {path} lacks the key {missing[0]!r}.")
    return Recipe(**{**data, "defaults": RecipeDefaults(**defaults), "source": str(path)})


def builtin_recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def find_recipe(reference: str) -> Recipe | None:
    """A built-in name ('tiny') or a path to a .yaml file; None when `reference` is neither."""
    if reference.endswith((".yaml", ".yml")):
        path = Path(reference)
        if not path.is_file():
            raise RecipeError(f"recipe file {reference} does not exist.")
        return load_recipe_file(path)
    path = RECIPE_DIR / f"{reference}.yaml"
    return load_recipe_file(path) if path.is_file() else None
