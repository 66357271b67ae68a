"""Bench contenders: one file each, one `Contender` object per file entry, listed once in CONTENDERS.

Adding one: write `bench/contenders/mine.py` defining `MINE = Contender("mine", Tier..., ...)` and add
`MINE` to CONTENDERS below. --compare, the run order, the step and end-to-end tables, the CSV/JSON rows
and the plot all read this list.
"""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, STEP, Contender, SetupColumn, Tier, TimedStep
from accelerate_graph.bench.contenders.compile import COMPILE
from accelerate_graph.bench.contenders.drop_in import DROP_IN, DROP_IN_FUSED
from accelerate_graph.bench.contenders.eager import EAGER
from accelerate_graph.bench.contenders.fused import FUSED
from accelerate_graph.bench.contenders.graph import GRAPH
from accelerate_graph.bench.contenders.hf_eager import HF_EAGER
from accelerate_graph.bench.contenders.hf_generate import HF_GENERATE, OUR_LOOP
from accelerate_graph.bench.contenders.native_generate import GENERATE_FUSED, NATIVE_GENERATE

# Canonical order: --compare names, table columns and files list contenders this way, whatever order
# the user typed. Within a tier, contenders also run in this order.
CONTENDERS: tuple[Contender, ...] = (
    EAGER,
    GRAPH,
    FUSED,
    COMPILE,
    HF_GENERATE,
    OUR_LOOP,
    NATIVE_GENERATE,
    GENERATE_FUSED,
    DROP_IN,
    DROP_IN_FUSED,
    HF_EAGER,
)


def contender_named(name: str) -> Contender | None:
    return next((c for c in CONTENDERS if c.name == name), None)


def chosen_contenders(compare: tuple[str, ...]) -> list[Contender]:
    """The contenders --compare turns on, in CONTENDERS order."""
    return [c for c in CONTENDERS if c.chosen_as in compare]


__all__ = [
    "CONTENDERS",
    "GENERATE",
    "STEP",
    "Contender",
    "SetupColumn",
    "Tier",
    "TimedStep",
    "chosen_contenders",
    "contender_named",
]
