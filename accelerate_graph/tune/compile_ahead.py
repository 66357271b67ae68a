"""The FP8 sweep's kernels compiled ahead: a trial is mostly Triton compiling the config's kernels (1-4 s a
config for sm_90 on one CPU core; the chain's timing replays for about 20 ms), so worker processes compile the
configs the sweep will try next into Triton's on-disk cache, where the sweep's own launch finds them.

Workers compile in the order the descent tries configs in its first round (each op's grid likeliest first,
the ops taken in turn) and skip what a bucket the sweep has left still queues. A worker that fails leaves
nothing worse than the sweep compiling that config itself."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator

import torch

from accelerate_graph.fused.kernels.configs import SkinnyConfig

MAX_WORKERS = 12  # each holds a CUDA context and one layer's weights on the GPU
SPARE_CPUS = 2  # the sweep's own process and the GPU's driver threads


def default_workers(cpus: int | None = None) -> int:
    """Compile workers for a machine of `cpus` CPUs (default this one's): all but SPARE_CPUS, at most
    MAX_WORKERS; 0 where that leaves fewer than 2 (no gain over compiling in the sweep)."""
    cpus = cpus if cpus is not None else os.cpu_count() or 1
    workers = min(MAX_WORKERS, cpus - SPARE_CPUS)
    return workers if workers >= 2 else 0


def first_round_order(
    start: dict[str, SkinnyConfig], grid: Callable[[str], list[SkinnyConfig]]
) -> list[tuple[str, SkinnyConfig]]:
    """(op, config) pairs as the descent's first round reaches them soonest: every op's first untried config,
    then every op's second, ...; each op's grid but the config it starts from (timed already)."""
    grids = [[(op, cfg) for cfg in grid(op) if cfg != start[op]] for op in start]
    return [pair for rank in itertools.zip_longest(*grids) for pair in rank if pair is not None]


class CompileAhead:
    """`workers` processes compiling, for the chains of `shapes` and `block` on `device`, the (op, config) jobs
    each bucket queues (`queue(rows, jobs)`); jobs of a bucket other than the last queued are skipped. A context
    manager: leaving it stops the workers. `compile_job`: (chain, op, cfg) -> None in the worker (picklable);
    `make_chain`: (shapes, block, rows, device) -> the chain it compiles for."""

    def __init__(
        self,
        shapes,
        block: int | None,
        device: torch.device,
        workers: int,
        compile_job: Callable | None = None,
        make_chain: Callable | None = None,
    ):
        from accelerate_graph import settings

        context = multiprocessing.get_context("spawn")  # CUDA in a worker needs a process of its own
        self._jobs = context.Queue()
        self._rows = context.Value("i", -1)
        self._workers = [
            context.Process(
                target=_work,
                args=(
                    self._jobs,
                    self._rows,
                    shapes,
                    block,
                    str(device),
                    settings.current().as_dict(),  # the settings class is made at import: no pickle
                    compile_job or _compile_fp8,
                    make_chain or _fp8_chain,
                ),
                daemon=True,
            )
            for _ in range(workers)
        ]
        for worker in self._workers:
            worker.start()

    def queue(self, rows: int, jobs: list[tuple[str, SkinnyConfig]]) -> None:
        """The bucket of `rows` rows is next: its jobs in order; what earlier buckets left is skipped."""
        with self._rows.get_lock():
            self._rows.value = rows
        for op, cfg in jobs:
            self._jobs.put((rows, op, cfg))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the workers: a compile under way is cut (the cache writes its entries whole)."""
        with self._rows.get_lock():
            self._rows.value = -1
        for worker in self._workers:
            worker.terminate()
        for worker in self._workers:
            worker.join(timeout_s)
        self._jobs.close()
        self._jobs.cancel_join_thread()

    def __enter__(self) -> CompileAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def compiling_ahead(shapes, block: int | None, device: torch.device, workers: int) -> Iterator[CompileAhead | None]:
    """A CompileAhead of `workers` processes, or None for 0."""
    if workers <= 0:
        yield None
        return
    with CompileAhead(shapes, block, device, workers) as ahead:
        yield ahead


def _fp8_chain(shapes, block: int | None, rows: int, device: torch.device):
    from accelerate_graph.tune.fp8_chain import Fp8Chain

    return Fp8Chain(shapes, block, rows, device, layers=1)  # one layer: its calls' inputs are all it needs


def _compile_fp8(chain, op: str, cfg: SkinnyConfig) -> None:
    chain.compile_only(op, cfg)


def _work(jobs, rows, shapes, block, device: str, run_settings: dict, compile_job, make_chain) -> None:
    """A worker: the jobs of the bucket being swept, compiled one after the other, each failure skipped (the
    sweep meets it again and records the refusal)."""
    from accelerate_graph import settings

    settings.enter(settings.from_recorded(run_settings, "the tune"))  # folds and PDL: which kernels compile
    where = torch.device(device)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    chain, chain_rows = None, None
    while True:
        bucket, op, cfg = jobs.get()
        if bucket != rows.value:
            continue
        try:
            if bucket != chain_rows:
                chain = None  # one bucket's chain at a time: the last one's freed before the next is made
                chain, chain_rows = make_chain(shapes, block, bucket, where), bucket
            compile_job(chain, op, cfg)
        except Exception:  # noqa: BLE001, S112 - the sweep compiles it again and records why it failed
            continue
