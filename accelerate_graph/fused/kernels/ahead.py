"""Our Triton kernels compiled ahead, side by side, rather than one by one at their first launch.

Under PDL the fused step runs our kernels inside opaque ops, which inductor does not compile: each variant
(op, config, rows class) compiled at its first launch, in the capture's warm-ups, one after the other in
the main thread. While `compiling_ahead` is active, each launch site (`launcher`) asks for its kernel's
compilation (`warmup`: compiled, not run; its outputs stay unwritten) instead of running it, and Triton's
async compile mode hands the compilations to a thread pool, one per distinct variant. Triton's compiler
leaves the GIL for most of its work: 8 sm_90 variants of the skinny kernel took 10.5 s one by one and
5.9-6.3 s on 2 threads (2-core CPU, stop 38). core/capture.py runs each graph's step once this way
before capturing any, with CUGRAPH_ACCEL_COMPILE_AHEAD=1. Off: on the H200 (stop 39, cold caches, four
buckets) it gained nothing once real launches went to the kernels directly (below): setup the Llama-3.2-1B
shape 14.8 / 16.8 / 16.6 s against 15.4 / 14.1 / 15.7 off, Qwen2.5-0.5B 11.9 / 16.6 against 14.0 / 17.4.
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


def traced(tensor) -> bool:
    """Whether a launch with `tensor` among its arguments is being traced (dynamo, or make_fx's fake and
    functional tensors when inductor lowers a triton_op), not run."""
    return type(tensor) is not torch.Tensor or torch.compiler.is_compiling()


def launcher(kernel, grid, traced: bool = False):
    """What a launch site calls with the kernel's arguments: `kernel[grid]`; through
    torch.library.wrap_triton when `traced`, so that the trace records it; while compiling ahead (and not
    traced) the kernel's warmup at `grid`. A real launch goes to the kernel directly, not through torch's
    wrapper: the wrapper adds num_ctas and reorders the options, which are part of Triton's in-memory key
    (a variant compiled ahead was compiled again at its launch), and launching through it cost setup time:
    four buckets' setup on the H200 (cold caches) 22.9 / 24.2 -> 15.4 / 14.1 / 15.7 s for the Llama-3.2-1B
    shape, 26.5 -> 14.0 / 17.4 s for Qwen2.5-0.5B (stop 39, docs/PERF.md)."""
    if traced:
        return torch.library.wrap_triton(kernel)[grid]
    if active() and not torch.compiler.is_compiling():
        return functools.partial(kernel.warmup, grid=grid)
    return kernel[grid]


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
