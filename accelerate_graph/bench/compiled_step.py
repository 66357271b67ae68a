"""The torch.compile contender: the session's own decode step, compiled with mode="reduce-overhead".

Inductor fuses the step's kernels and, in this mode, replays them through its own CUDA graphs
(cudagraph trees, in a memory pool separate from ours). Those graphs copy every input whose address
is not marked static into a private buffer, and skip graphs altogether for inputs they see mutated.
HF marks the full-size cache tensors, but a bucket's `[:b]` views are new tensor objects, so they
are marked here, with the session's input buffers: the compiled step then reads and writes the very
memory our graphs do, and both contenders do the same work.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from accelerate_graph.bench.timing import wall_seconds
from accelerate_graph.compat import torch_internals
from accelerate_graph.core.backends import Step
from accelerate_graph.core.decode_session import DecodeSession

COMPILE_MODE = "reduce-overhead"
TF32_ADVICE = ".*TensorFloat32 tensor cores for float32 matrix multiplication"
# Call 1 compiles, call 2 is the cudagraph tree's warm-up run, call 3 records its graph: the
# steady state starts after them, so all three count as compilation.
FIRST_CALLS = 3


@dataclass
class CompiledStep:
    call: Step
    seconds: float  # the first calls: compilation, warm-up and graph recording
    memory_bytes: int  # device memory reserved during them (0 on the CPU)
    graphs: int  # FX graphs dynamo made: more than one means graph breaks
    cudagraph_skips: int  # inductor ran a graph without CUDA graphs (on a GPU: a slower contender)

    def problems(self, bucket: int, on_gpu: bool) -> list[str]:
        """What a reader of the compile column should know (empty when it compiled cleanly). On the CPU
        inductor never uses CUDA graphs, so skips say nothing there."""
        notes = []
        if self.graphs > 1:
            notes.append(f"torch.compile split the batch-{bucket} step into {self.graphs} graphs (graph breaks)")
        if on_gpu and self.cudagraph_skips:
            notes.append(f"torch.compile ran {self.cudagraph_skips} graph(s) of batch {bucket} without CUDA graphs")
        return notes


def _mark_static(session: DecodeSession, bucket: int) -> None:
    for layer in session.kv.view(bucket).layers:
        for tensor in (layer.keys, layer.values, layer.cumulative_length):
            torch_internals.mark_static_address(tensor)
    for tensor in (session.input_ids, session.position_ids, session.attention_mask):
        torch_internals.mark_static_address(tensor)


def _reserved(device: torch.device) -> int:
    return torch.cuda.memory_reserved(device) if device.type == "cuda" else 0


def compile_step(session: DecodeSession, bucket: int, before: Callable[[], None]) -> CompiledStep:
    """Compile the step of `bucket` (static shapes: one compilation per bucket, like one graph per
    bucket) and run it until steady. `before` runs ahead of each call (rewind the cache, ...)."""
    _mark_static(session, bucket)
    compiled = torch.compile(session.step_fn(bucket), mode=COMPILE_MODE, dynamic=False)
    reserved = _reserved(session.device)
    graphs, skips = torch_internals.dynamo_graph_count(), torch_internals.cudagraph_skip_count()

    def first_calls() -> None:
        with torch.no_grad(), warnings.catch_warnings():
            # inductor suggests TF32 for the float32 matmul of the rotary embedding: the contender keeps
            # the model's own precision, as a user's torch.compile would, so the advice is noise here
            warnings.filterwarnings("ignore", message=TF32_ADVICE)
            for _ in range(FIRST_CALLS):
                before()
                compiled()

    seconds = wall_seconds(first_calls, session.device)
    return CompiledStep(
        compiled,
        seconds,
        max(_reserved(session.device) - reserved, 0),
        torch_internals.dynamo_graph_count() - graphs,
        torch_internals.cudagraph_skip_count() - skips,
    )


def mark_step_begin() -> None:
    """Tell cudagraph trees a new iteration starts, so it may overwrite the previous step's outputs."""
    torch.compiler.cudagraph_mark_step_begin()


@contextmanager
def recompile_headroom(entries: int) -> Iterator[None]:
    """Every bucket's step shares one code object, so each bucket is one more dynamo cache entry on
    it: past the default limit (8) dynamo would silently run the rest eagerly."""
    with torch_internals.recompile_limit_at_least(entries):
        yield


def forget_compiled() -> None:
    """Drop every compiled graph (and cudagraph trees' memory): between contexts, and before HF
    generate so its first call compiles from the same cold start a user's would."""
    torch.compiler.reset()
    if torch.cuda.is_available():  # older torch frees cudagraph trees only through their backend
        torch_internals.reset_cudagraph_trees()
