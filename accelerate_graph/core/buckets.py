"""Batch-size buckets: parse them, and pick the bucket a batch is padded up to."""

from __future__ import annotations

import bisect

from accelerate_graph.common.option_lists import parse_whole_numbers


def parse_buckets(text: str) -> tuple[int, ...]:
    """'1,8,16' -> (1, 8, 16). Rejects empty items, non-integers, values < 1 and duplicates."""
    return parse_whole_numbers(text, "buckets", 1, "1,8,16,32")


def bucket_for(batch: int, buckets: tuple[int, ...]) -> int | None:
    """Smallest bucket >= batch, or None when the batch is larger than every bucket."""
    index = bisect.bisect_left(buckets, batch)
    return buckets[index] if index < len(buckets) else None


def padded_batch(bucket: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest batch that lands in `bucket` with padding (the most padding it ever gets)."""
    index = buckets.index(bucket)
    smallest = buckets[index - 1] + 1 if index > 0 else 1
    return smallest if smallest < bucket else None


# Context buckets: attention in a graph reads only the first C cache slots. Below this many slots
# the saving is smaller than the cost of another graph per batch bucket.
SMALLEST_AUTO_CONTEXT = 256


def powers_of_two_to(top: int) -> tuple[int, ...]:
    """1, 2, 4, ... below `top`, then `top`: the batch buckets of a largest batch."""
    sizes, size = [], 1
    while size < top:
        sizes.append(size)
        size *= 2
    return (*sizes, top)


def auto_contexts(max_cache_len: int) -> tuple[int, ...]:
    """Powers of two from SMALLEST_AUTO_CONTEXT up to the cache length, which is always the last."""
    contexts, c = [], SMALLEST_AUTO_CONTEXT
    while c < max_cache_len:
        contexts.append(c)
        c *= 2
    return (*contexts, max_cache_len)


def parse_context_buckets(text: str) -> tuple[int, ...] | None:
    """'auto' -> None (decided from the cache length), 'full' -> () (one context: the whole cache),
    '256,1024' -> (256, 1024)."""
    if text.strip().lower() == "auto":
        return None
    if text.strip().lower() == "full":
        return ()
    return parse_whole_numbers(text, "contexts", 1, "256,512")


def resolve_contexts(requested: tuple[int, ...] | None, max_cache_len: int) -> tuple[int, ...]:
    """The context buckets to capture: the cache length always, and those asked for below it."""
    if requested is None:
        return auto_contexts(max_cache_len)
    return tuple(sorted({c for c in requested if c < max_cache_len} | {max_cache_len}))


def context_for(next_slot: int, contexts: tuple[int, ...]) -> int | None:
    """Smallest context bucket that holds the write slot `next_slot`; None when the cache is full."""
    index = bisect.bisect_right(contexts, next_slot)
    return contexts[index] if index < len(contexts) else None
