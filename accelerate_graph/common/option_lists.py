"""Comma-separated option values (--buckets, --context, --compare): one parser, one set of messages."""

from __future__ import annotations

from accelerate_graph.common.errors import BadOptionError


def split_items(text: str, option: str, example: str) -> list[str]:
    """'a, b' -> ['a', 'b']; an empty list or item is refused."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(item == "" for item in items):
        raise BadOptionError(f"{option} {text!r} has an empty item.", f"Give a comma-separated list, e.g. {example}.")
    return items


def refuse_duplicates(values: list, option: str) -> None:
    duplicate = next((value for value in values if values.count(value) > 1), None)
    if duplicate is not None:
        raise BadOptionError(f"{option} lists {duplicate} twice.", "Give each value once.")


def parse_whole_numbers(text: str, option: str, minimum: int, example: str) -> tuple[int, ...]:
    """'16,1,8' -> (1, 8, 16): whole numbers >= minimum, each once ('8' and '08' are the same)."""
    numbers = []
    for item in split_items(text, option, example):
        try:
            number = int(item)
        except ValueError:
            raise BadOptionError(
                f"{option} item {item!r} is not a whole number.", f"Give values like {example}."
            ) from None
        if number < minimum:
            raise BadOptionError(
                f"{option} item {number} is below {minimum}.", f"Every value must be at least {minimum}."
            )
        numbers.append(number)
    refuse_duplicates(numbers, option)
    return tuple(sorted(numbers))
