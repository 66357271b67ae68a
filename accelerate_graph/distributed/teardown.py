"""Leave the process group in the order that cannot hang, and never wait for it without a bound.

Seen on two H200s: after capturing graphs with NCCL all-reduces inside, destroy_process_group()
hung at exit until the process was killed (330 s; pytorch/pytorch#115388 is the same class: a
communicator torn down while graphs that hold its kernels, or unfinished work, still exist).
So: drop the graphs first, finish the device's queued work, meet at a barrier (only when every rank
is healthy: a dead peer would keep it waiting), destroy the group in a helper thread, and if that
does not return in time say so in one line; then the rank ends through os._exit either way.
"""

from __future__ import annotations

import gc
import os
import sys
import threading

import torch
import torch.distributed as dist

from accelerate_graph.common.debug import debug_enabled
from accelerate_graph.distributed import rank as ranks
from accelerate_graph.distributed.inductor_workers import release_process_resources

TEARDOWN_TIMEOUT_S = 10.0


def live_instances(cls: type) -> list:
    """Every object the collector tracks whose type is `cls` or a subclass. By type(obj), not isinstance:
    isinstance reads obj.__class__, and some module-level objects warn on any attribute read
    (torch.distributed.reduce_op's FutureWarning, printed by every --tp run)."""
    return [obj for obj in gc.get_objects() if issubclass(type(obj), cls)]


def _reset_cuda_graphs() -> int:
    """Reset every CUDA graph still alive: a graph holding NCCL kernels makes ncclCommDestroy hang
    (pytorch/pytorch#115388), and a reference kept by a cycle or a library would keep it alive."""
    if not torch.cuda.is_available():
        return 0
    graphs = live_instances(torch.cuda.CUDAGraph)
    for graph in graphs:
        graph.reset()
    return len(graphs)


def _finish(healthy: bool) -> None:
    if healthy:
        ranks.barrier()
    dist.destroy_process_group()


def leave_group(healthy: bool, timeout_s: float = TEARDOWN_TIMEOUT_S) -> bool:
    """True when the group was destroyed in time (or there was none); False when it was abandoned."""
    info = ranks.current()
    if not dist.is_initialized():
        ranks.forget()
        return True
    gc.collect()  # graphs referenced only from cycles (closures, frames) go before the communicator
    _reset_cuda_graphs()
    if info is not None and info.device.type == "cuda" and healthy:
        torch.cuda.synchronize(info.device)
        torch.cuda.empty_cache()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _finish(healthy)
        except BaseException as err:  # noqa: BLE001 - reported below, never raised from a thread
            errors.append(err)

    worker = threading.Thread(target=run, name="cugraph-accel-teardown", daemon=True)
    worker.start()
    worker.join(timeout_s)
    ranks.forget()
    who = f"rank {info.rank}" if info else "this process"
    if worker.is_alive():
        print(
            f"note: {who}: torch.distributed teardown did not finish within {timeout_s:.0f} s; "
            "ending the process without it.",
            file=sys.stderr,
            flush=True,
        )
        return False
    if errors and debug_enabled():  # a peer that ended first (it failed) makes the barrier fail: no news
        print(f"note: {who}: torch.distributed teardown failed: {errors[0]}", file=sys.stderr, flush=True)
    return True


def end_process(code: int) -> None:
    """End this rank now with `code`, after a bounded teardown. The interpreter's own finalization
    (module teardown, library destructors, NCCL's among them) is skipped: on a loaded machine it alone
    can take 10 s and more, and it is where a hang at exit would live."""
    release_process_resources()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
