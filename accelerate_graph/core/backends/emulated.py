"""CUDA-graph semantics without a GPU: record a step's tensor operations once, replay only those.

At capture the step runs under a TorchDispatchMode that logs every aten call with its argument and
output tensors. Replay calls each logged op again on the same tensor objects and copies fresh
results into the logged outputs; no Python model code runs. So, exactly as with a CUDA graph:
Python values are frozen at capture, intermediates live in fixed buffers, and in-place updates of
static tensors (the cache, its position counter) repeat on every replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from accelerate_graph.common.errors import CaptureError
from accelerate_graph.common.source_location import caller_location
from accelerate_graph.compat.torch_internals import DispatchMode, op_is_mutable, pytree_leaves
from accelerate_graph.core.backends.base import CaptureStats, Step
from accelerate_graph.core.backends.islands import IslandCall, island_hooks
from accelerate_graph.core.host_reads import HOST_SYNC_OPS, HostReadMode

aten = torch.ops.aten


def _is_collective(func) -> bool:
    """torch.distributed's ops (c10d: dist.all_reduce; _c10d_functional: the traceable ones). Their
    schemas do not mark the in-place result as written, so without this they would look like views
    and be skipped at replay: a rank would replay its partial sums and never meet its peers."""
    return func.namespace in ("c10d", "_c10d_functional")


def _finish_collective(func, result) -> None:
    """Replay must wait for a collective's result before anything reads it, as the eager call did."""
    for item in pytree_leaves(result):
        if isinstance(item, torch.Tensor):
            if func.namespace == "_c10d_functional":
                torch.ops._c10d_functional.wait_tensor(item)
        elif hasattr(item, "wait"):  # c10d's Work handle
            item.wait()


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else 0


@dataclass
class RecordedOp:
    func: Callable  # an aten op overload
    args: tuple
    kwargs: dict
    outputs: list[torch.Tensor]  # every tensor the op returned, in pytree order
    fresh: list[bool]  # per output: owns new memory, so replay copies the new value into it
    run_at_replay: bool  # False for pure views: the logged view still aliases the right memory
    collective: bool = False  # a torch.distributed op: replayed, and waited for, on every rank


class _Recorder(DispatchMode):
    """Logs ops; while an island runs it only passes them through and logs the island call instead."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[RecordedOp | IslandCall] = []
        self.in_island = False

    def enter_island(self, call: IslandCall) -> None:
        self.ops.append(call)
        self.in_island = True

    def exit_island(self, call: IslandCall) -> None:
        self.in_island = False

    def refuse_host_read(self, what: str) -> None:
        if not self.in_island:
            raise CaptureError(
                f"cannot capture {what} at {caller_location()}: it reads a device value on the host.",
                "Use {mode='piecewise'} or {mode='eager'} for this model.",
            )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.in_island:
            return func(*args, **kwargs)
        if func in HOST_SYNC_OPS:
            raise CaptureError(
                f"cannot capture {func.name()} at {caller_location()}: {HOST_SYNC_OPS[func]}.",
                "Use {mode='piecewise'} or {mode='eager'} for this model.",
            )
        out = func(*args, **kwargs)
        inputs = [a for a in pytree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        input_ptrs = {_storage_ptr(t) for t in inputs} - {0}
        outputs = [o for o in pytree_leaves(out) if isinstance(o, torch.Tensor)]
        fresh = [bool(o.numel()) and _storage_ptr(o) not in input_ptrs for o in outputs]
        collective = _is_collective(func)
        run = op_is_mutable(func) or any(fresh) or collective
        self.ops.append(RecordedOp(func, args, kwargs, outputs, fresh, run, collective))
        return out

    def held_bytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for op in self.ops
            if isinstance(op, RecordedOp)
            for t, is_fresh in zip(op.outputs, op.fresh)
            if is_fresh
        )


class EmulatedGraph:
    def __init__(self, ops: list[RecordedOp | IslandCall], output: torch.Tensor, stats: CaptureStats):
        self._ops = [op for op in ops if isinstance(op, IslandCall) or op.run_at_replay]
        self.output = output
        self.stats = stats

    def replay(self) -> torch.Tensor:
        with torch.no_grad():
            for op in self._ops:
                if isinstance(op, IslandCall):
                    op.run()
                    continue
                result = op.func(*op.args, **op.kwargs)
                if op.collective:
                    _finish_collective(op.func, result)
                if not any(op.fresh):
                    continue
                new = [r for r in pytree_leaves(result) if isinstance(r, torch.Tensor)]
                for logged, value, is_fresh in zip(op.outputs, new, op.fresh):
                    if is_fresh:
                        logged.copy_(value)
        return self.output


class EmulatedBackend:
    """Records on whatever device the tensors live on (the CPU in CI)."""

    name = "emulated"

    def capture(
        self, step: Step, warmups: int = 2, islands: Sequence[torch.nn.Module] = (), batch: int = 0
    ) -> EmulatedGraph:
        start = time.perf_counter()
        with torch.no_grad():
            for _ in range(warmups):
                step()
            recorder = _Recorder()
            hooks = island_hooks(islands, recorder.enter_island, recorder.exit_island)
            with hooks, HostReadMode(recorder.refuse_host_read), recorder:
                output = step()
        stats = CaptureStats(seconds=time.perf_counter() - start, memory_bytes=recorder.held_bytes())
        return EmulatedGraph(recorder.ops, output, stats)

    def synchronize(self) -> None:
        pass

    def release(self) -> None:
        pass  # dropped recordings are freed with their last reference
