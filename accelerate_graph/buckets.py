"""Batch-size buckets: parse them, and pick the bucket a batch is padded up to."""

from __future__ import annotations

import bisect

from .option_lists import parse_whole_numbers

# The engines' small end (SGLang, vLLM): powers of two, then steps of 8.
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32)


def parse_buckets(text: str) -> tuple[int, ...]:
    """'1,8,16' -> (1, 8, 16). Rejects empty items, non-integers, values < 1 and duplicates."""
    return parse_whole_numbers(text, "--buckets", 1, "--buckets 1,8,16,32")


def bucket_for(batch: int, buckets: tuple[int, ...]) -> int | None:
    """Smallest bucket >= batch, or None when the batch is larger than every bucket."""
    index = bisect.bisect_left(buckets, batch)
    return buckets[index] if index < len(buckets) else None


def padded_batch(bucket: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest batch that lands in `bucket` with padding (the most padding it ever gets)."""
    index = buckets.index(bucket)
    smallest = buckets[index - 1] + 1 if index > 0 else 1
    return smallest if smallest < bucket else None
