"""The model's own limits, read from its config before any weight is loaded.

A decode step at position p reads row p of a learned (GPT-2, OPT) or precomputed (GPT-J) position
table: a cache longer than that table ends in `IndexError: index out of range` on the CPU and a
device-side assert on a GPU, after the capture has already succeeded. So the cache length is held to
the position limit, whatever the config calls it.
"""

from __future__ import annotations

from pathlib import Path

from accelerate_graph.common.errors import BadOptionError, option

# The names configs use for "how many positions this model has", in the order they are trusted.
POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "max_seq_length",
)


def position_limit(config) -> tuple[int | None, str]:
    """(positions, the config key that says so); (None, "") for a model without a limit."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in POSITION_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            # GPT-2's config answers to max_position_embeddings through an alias: name its own key
            return value, getattr(text, "attribute_map", {}).get(key, key)
    return None, ""


def cache_length(requested: int | None, default: int, config) -> tuple[int, str | None]:
    """The cache length to use, and the one line that says it was shortened (None when it was not).

    An explicit request longer than the model's positions is refused; the default is cut to them."""
    limit, key = position_limit(config)
    if requested is not None:
        if limit is not None and requested > limit:
            raise BadOptionError(
                f"{option('max_cache_len', requested)} is longer than the model's {limit} positions ({key} in its config).",
                f"Use {option('max_cache_len', limit)} or less.",
            )
        return requested, None
    if limit is not None and default > limit:
        return limit, f"cache length {limit}, not the default {default}: the model has {limit} positions ({key})."
    return default, None


def peek_config(reference: str, revision: str | None = None):
    """The config of MODEL without its weights, or None when it cannot be read cheaply (a hub id not in
    the local cache: the load that follows then says why)."""
    from transformers import AutoConfig

    from accelerate_graph.models.loading import recipe_config
    from accelerate_graph.models.recipes import find_recipe

    folder = Path(reference).expanduser()
    if folder.is_dir():
        source, kwargs = str(folder), {}
    elif (recipe := find_recipe(reference)) is not None:
        return recipe_config(recipe)
    else:
        source, kwargs = reference, {"local_files_only": True, **({"revision": revision} if revision else {})}
    try:
        return AutoConfig.from_pretrained(source, **kwargs)
    except Exception:  # noqa: BLE001 - the full load reports a folder or hub id it cannot read
        return None
