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

from accelerate_graph.compat.torch_internals import (
    inductor_cache_tagged,
    inductor_decompositions_replaced,
    inductor_materialized,
    statically_known_true,
)

aten = torch.ops.aten

# Under the gemv_materialize setting (on by default) a GEMV's input vector is stored before the reduction
# reads it, so whatever computed it (silu(gate) * up, a norm) runs once in its producer's kernel, not once
# per output row inside the reduction (inlined, the 8B down_proj ran at ~2 TB/s). Set per compilation.
_materialize = [True]


def _one_row(mat1) -> bool:
    """Whether `mat1 @ weight` is lowered to a GEMV reduction: one row on a GPU. Long reductions too (the
    8B's down_proj): with its input stored first the GEMV ran at 3.9 TB/s, as fast as cuBLAS (H200)."""
    return mat1.device.type not in ("cpu", "mps") and statically_known_true(mat1.size(0) == 1)


def mm_as_reduction(mat1, mat2, original=None):
    """A one-row `mm` on a GPU as a multiply-and-sum; anything else as inductor decomposes it
    (`original`), or not at all."""
    if _one_row(mat1):
        if _materialize[-1]:
            mat1 = inductor_materialized(mat1)
        # in float32 like inductor's own (pw_cast_for_opmath): bf16 products would each be rounded
        return (mat1.unsqueeze(2).float() * mat2.unsqueeze(0).float()).sum(dim=1).to(mat1.dtype)
    return NotImplemented if original is None else original(mat1, mat2)


def addmm_as_mm(bias, mat1, mat2, beta=1, alpha=1, original=None):
    """`addmm` with a one-row `mat1` on a GPU as `mm` (decomposed further) plus the bias."""
    if _one_row(mat1):
        product = aten.mm(mat1, mat2)
        return (bias if beta == 1 else beta * bias) + (product if alpha == 1 else alpha * product)
    return NotImplemented if original is None else original(bias, mat1, mat2, beta=beta, alpha=alpha)


@functools.cache
def _source_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _decompose_addmm(original):
    return lambda bias, mat1, mat2, beta=1, alpha=1: addmm_as_mm(bias, mat1, mat2, beta, alpha, original)


def _decompose_mm(original):
    return lambda mat1, mat2: mm_as_reduction(mat1, mat2, original)


@contextlib.contextmanager
def gemv_at_batch_1(enabled: bool, materialize: bool = True) -> Iterator[None]:
    """Inductor lowers one-row matmuls, with or without a bias, to GEMV reductions while this is
    active (and `enabled`), their input stored first where `materialize`; what is compiled keeps its
    kernels after."""
    if not enabled:
        yield
        return
    makers = {aten.addmm.default: _decompose_addmm, aten.mm.default: _decompose_mm}
    # inductor's cache keys do not see decomposition tables: a tag with this file's hash keeps a graph
    # compiled without this lowering, or with another version of it, from being reused for one with it
    # the setting too: two compilations in one process may differ in it
    _materialize.append(materialize)
    try:
        with (
            inductor_decompositions_replaced(makers),
            inductor_cache_tagged(("cugraph-accel-gemv", _source_hash(), materialize)),
        ):
            yield
    finally:
        _materialize.pop()
