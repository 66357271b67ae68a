"""Triton's internals this package borrows (Triton ships with torch; its version is the one torch pins)."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any


def async_compile_mode(executor: Executor) -> Any | None:
    """`triton.runtime._async_compile.AsyncCompileMode(executor)`, or None where this Triton lacks it.

    While the mode is active (a context manager, in the thread that entered it), a JIT kernel that is
    not compiled yet hands its compilation to `executor` and keeps a future in its cache, one per
    distinct compilation however often it is asked for; leaving the mode waits for every one. Public
    Triton compiles one kernel at a time, in the calling thread (`JITFunction.warmup`, or the first
    launch). Added in triton 3.4 (triton-lang/triton#7306); checked with triton 3.9 (torch 2.13, CPU), not
    yet with 3.6 (torch 2.11, the H200). Where it is absent, fused/kernels/ahead.py compiles nothing ahead."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return None
    return AsyncCompileMode(executor)
