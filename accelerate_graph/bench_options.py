"""Parse what `bench` compares and over which cache lengths: --compare and --context."""

from __future__ import annotations

from .errors import BadOptionError

# Canonical order: tables, files and plots list contenders this way whatever order the user typed.
CONTENDERS = ("eager", "graph", "compile", "hf-generate")
STEP_CONTENDERS = ("eager", "graph", "compile")  # timed one decode step at a time
DEFAULT_COMPARE = ("eager", "graph")


def _split(text: str, option: str, example: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(item == "" for item in items):
        raise BadOptionError(f"{option} {text!r} has an empty item.", f"Give a comma-separated list, e.g. {example}.")
    duplicate = next((item for item in items if items.count(item) > 1), None)
    if duplicate is not None:
        raise BadOptionError(f"{option} lists {duplicate} twice.", "Give each value once.")
    return items


def parse_compare(text: str) -> tuple[str, ...]:
    """'graph,eager' -> ('eager', 'graph'). Rejects unknown names, empty items and duplicates."""
    names = [name.lower() for name in _split(text, "--compare", "--compare eager,graph,compile")]
    unknown = next((name for name in names if name not in CONTENDERS), None)
    if unknown is not None:
        raise BadOptionError(f"--compare item {unknown!r} is not a contender.", f"Choose from {', '.join(CONTENDERS)}.")
    return tuple(name for name in CONTENDERS if name in names)


def parse_contexts(text: str) -> tuple[int, ...]:
    """'1024,128' -> (128, 1024): cache lengths, whole numbers >= 2, each once."""
    lengths = []
    for item in _split(text, "--context", "--context 128,1024,4096"):
        try:
            length = int(item)
        except ValueError:
            raise BadOptionError(
                f"--context item {item!r} is not a whole number.", "Give cache lengths like --context 128,1024,4096."
            ) from None
        if length < 2:
            raise BadOptionError(f"--context item {length} is below 2.", "A cache needs at least 2 slots.")
        lengths.append(length)
    if len(set(lengths)) != len(lengths):  # "1024" and "01024" are the same length
        duplicate = next(n for n in lengths if lengths.count(n) > 1)
        raise BadOptionError(f"--context lists {duplicate} twice.", "Give each cache length once.")
    return tuple(sorted(lengths))
