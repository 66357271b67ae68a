"""Batch 1's projections as GEMV kernels: one-row matmuls lowered by inductor to reductions.

At batch 1 every projection is a matrix-vector product. Decomposed into a multiply-and-sum, inductor
compiles it to a triton reduction fused with what surrounds it (the bias, an activation, a residual
add) instead of calling cuBLAS: about 150 fewer kernels and a quarter less GPU time per Qwen2.5-0.5B
step on the H200. Inductor does this itself only under coordinate descent tuning, and only for `mm` (a
linear with a bias is an `addmm`). Here both are decomposed and compiled with inductor's default
reduction configs. Coordinate descent made batch 1's kernels 2-12% faster for ~10 s more compiling,
and torch 2.11 reloaded its tuned configs from the cache as slower ones than the defaults (docs/PERF.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

aten = torch.ops.aten


def _one_row(mat1) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return mat1.device.type not in ("cpu", "mps") and statically_known_true(mat1.size(0) == 1)


def mm_as_reduction(mat1, mat2, original=None):
    """A one-row `mm` on a GPU as a multiply-and-sum; anything else as inductor decomposes it
    (`original`), or not at all."""
    if _one_row(mat1):
        # in float32 like inductor's own (pw_cast_for_opmath): bf16 products would each be rounded
        return (mat1.unsqueeze(2).float() * mat2.unsqueeze(0).float()).sum(dim=1).to(mat1.dtype)
    return NotImplemented if original is None else original(mat1, mat2)


def addmm_as_mm(bias, mat1, mat2, beta=1, alpha=1, original=None):
    """`addmm` with a one-row `mat1` on a GPU as `mm` (decomposed further) plus the bias."""
    if _one_row(mat1):
        product = aten.mm(mat1, mat2)
        return (bias if beta == 1 else beta * bias) + (product if alpha == 1 else alpha * product)
    return NotImplemented if original is None else original(bias, mat1, mat2, beta=beta, alpha=alpha)


def _decomposition_tables() -> list[dict]:
    """The tables inductor reads (the cached fast-random one is a copy of the base one)."""
    from torch._inductor import decomposition

    tables = [decomposition.decompositions]
    fast = getattr(decomposition, "fast_random_decomps", None)
    if fast is not None:
        tables.append(fast())
    return tables


@functools.cache
def _source_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


class LoweringTag(CustomGraphPass):
    """Changes no graph (it runs the pass it wraps, if any). Its uuid enters inductor's cache keys,
    which do not see decomposition tables: a graph compiled without this lowering, or with another
    version of it, is then never reused for one compiled with it."""

    def __init__(self, inner: CustomGraphPass | None):
        self.inner = inner

    def __call__(self, graph: torch.fx.graph.Graph) -> None:
        if self.inner is not None:
            self.inner(graph)

    def uuid(self):
        return ("cugraph-accel-gemv", _source_hash(), None if self.inner is None else self.inner.uuid())


def _decompose_addmm(original):
    return lambda bias, mat1, mat2, beta=1, alpha=1: addmm_as_mm(bias, mat1, mat2, beta, alpha, original)


def _decompose_mm(original):
    return lambda mat1, mat2: mm_as_reduction(mat1, mat2, original)


@contextlib.contextmanager
def gemv_at_batch_1(enabled: bool) -> Iterator[None]:
    """Inductor lowers one-row matmuls, with or without a bias, to GEMV reductions while this is
    active (and `enabled`); what is compiled keeps its kernels after."""
    if not enabled:
        yield
        return
    makers = {aten.addmm.default: _decompose_addmm, aten.mm.default: _decompose_mm}
    saved = [(table, op, table.get(op)) for table in _decomposition_tables() for op in makers]
    for table, op, original in saved:
        table[op] = makers[op](original)
    current = inductor_config.post_grad_custom_post_pass
    # a user's pass that inductor cannot key (no uuid) already keeps the graph out of its caches
    tag = (
        {"post_grad_custom_post_pass": LoweringTag(current)}
        if current is None or isinstance(current, CustomGraphPass)
        else {}
    )
    try:
        with inductor_config.patch(tag):
            yield
    finally:
        for table, op, original in saved:
            if original is None:
                table.pop(op, None)
            else:
                table[op] = original
