"""Parse what `bench` compares and over which cache lengths: --compare and --context."""

from __future__ import annotations

from accelerate_graph.bench.contenders import CONTENDERS as REGISTERED
from accelerate_graph.common.errors import BadOptionError, option
from accelerate_graph.common.option_lists import parse_whole_numbers, refuse_duplicates, split_items

# The names --compare takes, in the registry's canonical order (our-loop comes with hf-generate).
CONTENDERS = tuple(c.name for c in REGISTERED if not c.selected_by)
DEFAULT_COMPARE = ("eager", "graph")


def parse_compare(text: str) -> tuple[str, ...]:
    """'graph,eager' -> ('eager', 'graph'). Rejects unknown names, empty items and duplicates."""
    names = [name.lower() for name in split_items(text, "compare", "eager,graph,compile")]
    refuse_duplicates(names, "compare")
    unknown = next((name for name in names if name not in CONTENDERS), None)
    if unknown is not None:
        raise BadOptionError(
            f"{option('compare')} item {unknown!r} is not a contender.", f"Choose from {', '.join(CONTENDERS)}."
        )
    return tuple(name for name in CONTENDERS if name in names)


def parse_cache_lengths(text: str) -> tuple[int, ...]:
    """'1024,128' -> (128, 1024): cache lengths, whole numbers >= 2, each once."""
    return parse_whole_numbers(text, "context", 2, "128,1024,4096")
