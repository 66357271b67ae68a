"""Our Triton kernels compiled ahead, side by side, rather than one by one at their first launch.

Under PDL the fused step runs our kernels inside opaque ops, which inductor does not compile: each variant
(op, config, rows class) compiled at its first launch, in the capture's warm-ups, one after the other in
the main thread. While `compiling_ahead` is active, each launch site (`launcher`) asks for its kernel's
compilation (`warmup`: compiled, not run; its outputs stay unwritten) instead of running it, and Triton's
async compile mode hands the compilations to a thread pool, one per distinct variant. Triton's compiler
leaves the GIL for most of its work: 8 sm_90 variants of the skinny kernel took 10.5 s one by one and
5.9-6.3 s on 2 threads (2-core CPU, stop 38). core/capture.py runs each graph's step once this way
before capturing any (CUGRAPH_ACCEL_COMPILE_AHEAD=1; off until measured on a GPU).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch

from accelerate_graph.compat import triton_internals

ENABLED = os.environ.get("CUGRAPH_ACCEL_COMPILE_AHEAD", "0") == "1"
_state = threading.local()


def active() -> bool:
    """Whether this thread's launches compile ahead instead of running."""
    return getattr(_state, "on", False)


def launcher(kernel, grid, wrap: bool = False):
    """What a launch site calls with the kernel's arguments: `kernel[grid]` (through
    torch.library.wrap_triton when `wrap`, so that a traced launch is seen), or, while compiling ahead
    and not traced, the kernel's warmup at `grid`."""
    if active() and not torch.compiler.is_compiling():
        return functools.partial(kernel.warmup, grid=grid)
    return (torch.library.wrap_triton(kernel) if wrap else kernel)[grid]


def workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@contextlib.contextmanager
def compiling_ahead() -> Iterator[bool]:
    """Launches in this thread compile ahead while active (yields True), every compilation finished on
    leaving; yields False (and changes nothing) where this Triton has no async compile mode."""
    with ThreadPoolExecutor(workers(), thread_name_prefix="cugraph-accel-compile") as pool:
        mode = triton_internals.async_compile_mode(pool)
        if mode is None:
            yield False
            return
        with mode:
            _state.on = True
            try:
                yield True
            finally:
                _state.on = False
