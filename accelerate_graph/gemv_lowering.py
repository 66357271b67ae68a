"""Batch 1's projections as GEMV kernels: inductor's lowering of a one-row matmul to a reduction.

With coordinate descent tuning on, inductor decomposes a one-row `mm` into a multiply-and-sum that it
compiles to a triton reduction, tuned, and fused with what surrounds it (the bias, an activation, a
residual add), instead of calling cuBLAS (torch/_inductor/decomposition.py). A linear with a bias is an
`addmm`, which that lowering skips: Qwen2's q/k/v projections stayed 72 cuBLAS calls per step on the
H200. Here `addmm` with one row becomes `mm` plus the bias, so it takes the same lowering.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch._inductor.config as inductor_config

aten = torch.ops.aten


def addmm_as_mm(bias, mat1, mat2, beta=1, alpha=1, original=None):
    """`addmm` with a one-row `mat1` on a GPU as `mm` plus the bias (decomposed further by inductor);
    anything else as inductor decomposes it by default (`original`), or not at all."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if mat1.device.type not in ("cpu", "mps") and statically_known_true(mat1.size(0) == 1):
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


@contextlib.contextmanager
def gemv_at_batch_1(enabled: bool) -> Iterator[None]:
    """Inductor lowers one-row matmuls, with or without a bias, to tuned GEMV reductions while this
    is active (and `enabled`); what is compiled keeps its kernels after."""
    if not enabled:
        yield
        return
    saved = [(table, table.get(aten.addmm.default)) for table in _decomposition_tables()]
    for table, original in saved:

        def decompose(bias, mat1, mat2, beta=1, alpha=1, original=original):
            return addmm_as_mm(bias, mat1, mat2, beta, alpha, original)

        table[aten.addmm.default] = decompose
    try:
        with inductor_config.patch(coordinate_descent_tuning=True):
            yield
    finally:
        for table, original in saved:
            if original is None:
                table.pop(aten.addmm.default, None)
            else:
                table[aten.addmm.default] = original
