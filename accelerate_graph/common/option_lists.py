"""Comma-separated option values (buckets, context buckets, --compare, --context): one parser, one set of
messages. `name` is the option's keyword (common/errors.py: the CLI writes it as its flag)."""

from __future__ import annotations

from accelerate_graph.common.errors import BadOptionError, option


def split_items(text: str, name: str, example: str) -> list[str]:
    """'a, b' -> ['a', 'b']; an empty list or item is refused. `example`: a valid value, for the hint."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(item == "" for item in items):
        raise BadOptionError(
            f"{option(name, text)} has an empty item.",
            f"Give a comma-separated list, e.g. {option(name, example)}.",
        )
    return items


def refuse_duplicates(values: list, name: str) -> None:
    duplicate = next((value for value in values if values.count(value) > 1), None)
    if duplicate is not None:
        raise BadOptionError(f"{option(name)} lists {duplicate} twice.", "Give each value once.")


def parse_whole_numbers(text: str, name: str, minimum: int, example: str) -> tuple[int, ...]:
    """'16,1,8' -> (1, 8, 16): whole numbers >= minimum, each once ('8' and '08' are the same)."""
    numbers = []
    for item in split_items(text, name, example):
        try:
            number = int(item)
        except ValueError:
            raise BadOptionError(
                f"{option(name)} item {item!r} is not a whole number.",
                f"Give values like {option(name, example)}.",
            ) from None
        if number < minimum:
            raise BadOptionError(
                f"{option(name)} item {number} is below {minimum}.", f"Every value must be at least {minimum}."
            )
        numbers.append(number)
    refuse_duplicates(numbers, name)
    return tuple(sorted(numbers))
