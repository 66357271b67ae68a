"""compile: torch.compile(mode="reduce-overhead") of the session's own step, with its cudagraph trees
(bench/compiled_step.py). Runs after every contender that replays our graphs (Tier)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from accelerate_graph.bench.contenders.base import Contender, ContextRun, SetupColumn, Tier, TimedStep


def compiled_step(graphs, batch: int, rewind: Callable[[], None]) -> TimedStep:
    from accelerate_graph.bench.compiled_step import compile_step, mark_step_begin

    session = graphs.session

    def before() -> None:
        rewind()
        mark_step_begin()

    compiled = compile_step(session, batch, before)

    def call(tokens, positions):
        session.load_inputs(batch, tokens, positions)  # what graphs.run and graphs.eager do too
        return compiled.call()

    notes = compiled.problems(batch, on_gpu=session.device.type == "cuda")
    return TimedStep("compile", call, compiled.seconds, compiled.memory_bytes, mark_step_begin, notes)


@contextmanager
def compile_scope(run: ContextRun) -> Iterator:
    """One dynamo cache entry per batch, then everything compiled forgotten (HF generate starts cold)."""
    from accelerate_graph.bench.compiled_step import forget_compiled, recompile_headroom

    with recompile_headroom(len(run.prepared.plan.buckets) + 8):
        yield run.graphs
    forget_compiled()


COMPILE = Contender(
    "compile",
    Tier.TORCH_COMPILE,
    color="tab:blue",
    step=compiled_step,
    scope=compile_scope,
    columns=(SetupColumn("compile\ns", lambda row: f"{row.setup_seconds:.1f}", summed=True),),
    stage="compiling, then timing torch.compile",
)
