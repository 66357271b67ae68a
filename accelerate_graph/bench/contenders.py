"""The contenders timed one decode step at a time: eager, our graph replay (of HF's step, or of the
inductor-compiled step: fused), torch.compile.

Each takes a batch's next tokens and positions ([b] each) and runs one step of the same session:
the same static buffers, the same shared KV cache, the same model, dtype and attention. Their
setup (capture, compilation) is done here, before timing starts, and reported apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from accelerate_graph.bench.compiled_step import compile_step, mark_step_begin
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.verify.reference import eager_step

StepCall = Callable[[torch.Tensor, torch.Tensor], object]


def _nothing() -> None:
    pass


@dataclass
class StepContender:
    name: str
    call: StepCall
    setup_seconds: float | None = None  # capture (graph) or compilation (compile)
    memory_bytes: int | None = None
    before: Callable[[], None] = _nothing  # untimed, before every call
    notes: list[str] = field(default_factory=list)


def _graph(graphs: DecodeGraphs, bucket: int, name: str) -> StepContender:
    def call(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # the graph's own output, like eager's and compile's: a copy out is the caller's choice, not the step's
        return graphs.run(tokens, positions, copy=False)

    return StepContender(name, call, graphs.bucket_seconds(bucket), graphs.bucket_memory(bucket))


def _compiled(graphs: DecodeGraphs, bucket: int, rewind: Callable[[], None]) -> StepContender:
    session = graphs.session

    def before() -> None:
        rewind()
        mark_step_begin()

    compiled = compile_step(session, bucket, before)

    def call(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        session.load_inputs(bucket, tokens, positions)  # what graphs.run and eager_step do too
        return compiled.call()

    notes = compiled.problems(bucket, on_gpu=session.device.type == "cuda")
    return StepContender("compile", call, compiled.seconds, compiled.memory_bytes, mark_step_begin, notes)


def build_contender(name: str, graphs: DecodeGraphs, bucket: int, rewind: Callable[[], None]) -> StepContender:
    """Set up contender `name` for `bucket`. `rewind` puts the cache back at the prompt's end, which
    compilation needs before each of its first calls."""
    if name == "eager":
        return StepContender("eager", functools.partial(eager_step, graphs.session))
    if name in ("graph", "fused"):  # fused: graphs of the inductor-compiled step (capture_fused)
        return _graph(graphs, bucket, name)
    if name == "compile":
        return _compiled(graphs, bucket, rewind)
    raise ValueError(f"{name!r} is not a step contender")
