"""Batch-size buckets: parse them, and pick the bucket a batch is padded up to."""

from __future__ import annotations

import bisect

from .errors import BadOptionError

# The engines' small end (SGLang, vLLM): powers of two, then steps of 8.
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32)


def parse_buckets(text: str) -> tuple[int, ...]:
    """'1,8,16' -> (1, 8, 16). Rejects empty items, non-integers, values < 1 and duplicates."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(item == "" for item in items):
        raise BadOptionError(
            f"--buckets {text!r} has an empty item.", "Give comma-separated batch sizes, e.g. --buckets 1,8,16,32."
        )
    sizes = []
    for item in items:
        try:
            size = int(item)
        except ValueError:
            raise BadOptionError(
                f"--buckets item {item!r} is not a whole number.", "Give batch sizes like --buckets 1,8,16,32."
            ) from None
        if size < 1:
            raise BadOptionError(f"--buckets item {size} is below 1.", "Every batch size must be at least 1.")
        sizes.append(size)
    if len(set(sizes)) != len(sizes):
        dup = next(s for s in sizes if sizes.count(s) > 1)
        raise BadOptionError(f"--buckets lists {dup} twice.", "Give each batch size once.")
    return tuple(sorted(sizes))


def bucket_for(batch: int, buckets: tuple[int, ...]) -> int | None:
    """Smallest bucket >= batch, or None when the batch is larger than every bucket."""
    index = bisect.bisect_left(buckets, batch)
    return buckets[index] if index < len(buckets) else None


def padded_batch(bucket: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest batch that lands in `bucket` with padding (the most padding it ever gets)."""
    index = buckets.index(bucket)
    smallest = buckets[index - 1] + 1 if index > 0 else 1
    return smallest if smallest < bucket else None
