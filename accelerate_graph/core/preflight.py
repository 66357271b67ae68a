"""Before the cache and graphs are allocated: does the request fit, and if not, what would.

The weights are loaded by then, so the device's free memory already excludes them; what remains must
hold the cache, the graph pool, the largest bucket's activations (and, under --fuse, inductor's
workspace) with a margin. A request that cannot fit is refused with one line naming the largest batch
bucket that fits at this cache length and the longest cache that fits at these buckets.
"""

from __future__ import annotations

import torch

from accelerate_graph.common.errors import ResourceError, option
from accelerate_graph.core.memory import Geometry, free_bytes, gib, request_need

CACHE_STEP = 256  # the longest cache that fits is said in whole multiples of this


def preflight(
    config,
    dtype: torch.dtype,
    device: torch.device,
    buckets: tuple[int, ...],
    cache_len: int,
    prompt_len: int,
    fuse: bool = False,
) -> str:
    """Refuse a request that cannot fit; otherwise the one line that says what was checked (or why not)."""
    geometry = Geometry.of(config)
    if geometry is None:
        return "memory preflight skipped: the config's geometry is not a standard decoder's"
    free, source = free_bytes(device)
    if free is None:
        return f"memory preflight skipped: {source}"
    largest = max(buckets)

    def need(batch: int, length: int) -> int:
        return request_need(geometry, dtype, batch, length, min(prompt_len, length - 1), fuse).total

    wanted = request_need(geometry, dtype, largest, cache_len, prompt_len, fuse)
    if wanted.total <= free:
        return f"memory preflight: needs {gib(wanted.total)} beyond the weights, {gib(free)} free ({source})"
    raise ResourceError(
        f"batch {largest} at cache {cache_len} needs {gib(wanted.total)} beyond the weights "
        f"({wanted.describe()}); {gib(free)} is free.",
        _what_fits(need, free, buckets, cache_len, prompt_len),
    )


def largest_fitting(fits, low: int, high: int) -> int | None:
    """The largest n in [low, high] with fits(n), for a `fits` that holds up to some n and not above
    (need grows with batch and with cache length); None when not even `low` fits. A bisection: a bucket
    of 100,000,000 costs ~27 estimates, not one per batch size."""
    if high < low or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _what_fits(need, free: int, buckets: tuple[int, ...], cache_len: int, prompt_len: int) -> str:
    """The largest bucket at this cache length, the longest cache at the largest bucket."""
    options = []
    batch = largest_fitting(lambda b: need(b, cache_len) <= free, 1, max(buckets))
    if batch is not None:
        options.append(f"batch buckets up to {batch} at {option('max_cache_len', cache_len)}")
    # cache lengths in whole steps, longer than the prompt: step k is k * CACHE_STEP slots
    steps = largest_fitting(
        lambda k: need(max(buckets), k * CACHE_STEP) <= free, prompt_len // CACHE_STEP + 1, cache_len // CACHE_STEP
    )
    if steps is not None:
        options.append(f"{option('max_cache_len', steps * CACHE_STEP)} at batch {max(buckets)}")
    if not options:
        return f"Not even batch 1 fits: free device memory, use a smaller {option('dtype')} or a smaller model."
    return "What fits: " + ", or ".join(options) + "."
