"""Which of a model's decoder-layer products a GPU's tuning table holds. A product the table lacks runs an
unmeasured default config, which can cost more than the table's name suggests: with an FP8 table swept on the
8B's shapes only, Llama-3.2-1B's FP8 step ran 24% slower than its bf16 one at 32 rows (8% faster once tuned).
The bench header says how many it holds and how to sweep the rest."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from accelerate_graph import settings
from accelerate_graph.common.errors import CugraphAccelError
from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.layer_program import fp8_folds, skinny_at
from accelerate_graph.quant import fp8_skinny
from accelerate_graph.quant.fp8_format import SCHEME_BLOCK
from accelerate_graph.quant.fp8_matmul import SKINNY_MAX_ROWS
from accelerate_graph.tune.fp8_chain import tuned_calls
from accelerate_graph.tune.model_shapes import LayerShapes, layer_shapes


@dataclasses.dataclass(frozen=True)
class TableCoverage:
    """`held` of a model's `calls` (each product of a decoder layer at each row bucket) have a config in the
    table that serves them; `table`: "tuning_table" (bf16 skinny kernels) or "fp8_tuning_table"; `missing`:
    the keys it lacks."""

    table: str
    held: int
    calls: int
    missing: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"held": self.held, "calls": self.calls, "missing": list(self.missing)}


def coverage_of(shapes: LayerShapes, buckets: Sequence[int], device_name: str, weights: str) -> TableCoverage:
    """The coverage of `shapes`' products at `buckets` rows by `device_name`'s table: the FP8 one where the layers
    are FP8 (`weights` fp8 or fp8-block, or an FP8 checkpoint: its kernel runs every decode batch), else the bf16
    one, of the calls that run the skinny kernels at those rows."""
    if weights != "model" or shapes.fp8_block is not None:
        block = shapes.fp8_block if shapes.fp8_block is not None else SCHEME_BLOCK.get(weights)
        folds = fp8_folds(settings.current().fp8_fold, True, True)  # as on the GPU, where the kernel runs
        calls = tuned_calls(shapes, block, folds).values()
        keys = [fp8_skinny.table_key(block, m, *c.key) for m in buckets if m <= SKINNY_MAX_ROWS for c in calls]
        return _held("fp8_tuning_table", keys, lambda key: fp8_skinny.table_holds(device_name, key))
    keys = [
        configs.table_key(kind, configs.m_bucket(m), ns, k)
        for m in buckets
        for kind, ns, k in shapes.calls.values()
        if _default_when_missing(kind, ns, k, m)
    ]
    return _held("tuning_table", keys, lambda key: configs.table_holds(device_name, key))


def _default_when_missing(op: str, ns: tuple[int, ...], k: int, rows: int) -> bool:
    """Whether a bf16 call runs the skinny kernels' default config where the table lacks it: at batch 1 only
    with the skinny_batch_1 setting on (auto: a call the table lacks runs inductor's kernels, as it should);
    above, where the call runs the skinny kernels at those rows at all (the others run cuBLAS)."""
    if rows == 1:
        return settings.current().skinny_batch_1 == "on"
    return skinny_at(op, ns, k, rows)


def table_coverage(
    reference: str, revision: str | None, buckets: Sequence[int], device_name: str, weights: str
) -> TableCoverage | None:
    """`coverage_of` MODEL's layers; None where they do not run the skinny kernels (nothing a table could hold)
    or their shapes cannot be read."""
    try:
        shapes = layer_shapes(reference, revision)
    except (CugraphAccelError, OSError, ValueError):
        return None
    return coverage_of(shapes, buckets, device_name, weights)


def _held(table: str, keys: list[str], holds) -> TableCoverage:
    keys = list(dict.fromkeys(keys))  # merged calls share a key
    missing = tuple(key for key in keys if not holds(key))
    return TableCoverage(table, len(keys) - len(missing), len(keys), missing)
