"""Run one command on N ranks: start them with torch's own launcher, or join the torchrun we are in.

Each rank runs the same command body; rank 0 alone prints and writes. A rank's outcome (exit code
and its one-line message) goes to a small report file; the parent waits with torch's ProcessContext,
which ends every other rank as soon as one fails, then turns the reports into one line. No rank can
outlive the run: each ends through teardown.end_process after a bounded teardown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch.multiprocessing as mp

from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.common.errors import CugraphAccelError, DistributedError
from accelerate_graph.distributed import rank as ranks
from accelerate_graph.distributed.all_reduce import NO_MULTICAST_ENV, turn_off_multicast
from accelerate_graph.distributed.rank import WORKER_ENV
from accelerate_graph.distributed.teardown import end_process, leave_group

GRACE_S = 5.0  # after one rank fails, the others get this long to end before they are killed

# A command's failure -> (exit code, the one line to show or None when the command already said it).
Classify = Callable[[BaseException], tuple[int, str | None]]


@dataclass
class RankReport:
    rank: int
    code: int
    message: str | None = None
    domain: bool = False  # one of our own errors (not a peer's lost connection)
    at: float = 0.0  # when it failed: the first failure is the cause, later ones its echo on the peers


def run_on_ranks(world_size: int, target: Callable, kwargs: dict, classify: Classify) -> int:
    """Run target(**kwargs) on every rank; the exit code of the run (raises DistributedError with the
    failing rank's line). Inside torchrun this process is one of the ranks and never returns."""
    if ranks.in_torchrun():
        _run_here(target, kwargs, classify)
    return _spawn(world_size, target, kwargs, classify)


def _outcome(err: BaseException, classify: Classify) -> tuple[int, str | None, bool]:
    try:
        code, message = classify(err)
    except Exception:  # noqa: BLE001 - the classifier must never hide the failure itself
        code, message = 1, f"{type(err).__name__}: {err}"
    return code, message, isinstance(err, CugraphAccelError)


def _run(target: Callable, kwargs: dict, classify: Classify, rank: int) -> RankReport:
    try:
        target(**kwargs)
    except KeyboardInterrupt:
        return RankReport(rank, 130, "interrupted: nothing was written.")
    except BaseException as err:  # noqa: BLE001 - every failure becomes this rank's report
        return RankReport(rank, *_outcome(err, classify), at=time.time())
    return RankReport(rank, 0)


def _run_here(target: Callable, kwargs: dict, classify: Classify) -> None:
    """torchrun started us: this process is one rank; each rank says its own failure."""
    os.environ[WORKER_ENV] = "1"
    turn_off_multicast()
    report = _run(target, kwargs, classify, int(os.environ["RANK"]))
    if report.message:
        print(f"error: rank {report.rank}: {report.message}", file=sys.stderr, flush=True)
    leave_group(healthy=report.code == 0)
    end_process(report.code)


def _end_with_parent(parent: int) -> None:
    """A rank whose launcher is gone (killed by a timeout, say) ends too: no orphan keeps a GPU."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="cugraph-accel-parent-watch", daemon=True).start()


def _rank_main(index: int, world: int, port: int, target, kwargs, classify, folder: str, parent: int) -> None:
    _end_with_parent(parent)
    os.environ.update(
        {
            WORKER_ENV: "1",
            "RANK": str(index),
            "LOCAL_RANK": str(index),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            **NO_MULTICAST_ENV,  # before any communicator or symmetric buffer exists
        }
    )
    _quiet_libraries()
    report = _run(target, kwargs, classify, index)
    atomic_write_text(Path(folder) / f"rank{index}.json", json.dumps(asdict(report)))
    leave_group(healthy=report.code == 0)
    end_process(report.code)


def _quiet_libraries() -> None:
    """No per-rank weight-loading bars: N of them interleave, and tqdm's bars take a multiprocessing
    lock that a rank ending through os._exit would leave behind as a 'leaked semaphore'."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(world: int, target: Callable, kwargs: dict, classify: Classify) -> int:
    first_failure: tuple[int, int] | None = None  # (rank, exit code) of the rank that ended first
    with tempfile.TemporaryDirectory(prefix="cugraph-accel-tp-") as folder:
        args = (world, _free_port(), target, kwargs, classify, folder, os.getpid())
        context = mp.start_processes(_rank_main, args=args, nprocs=world, join=False, start_method="spawn")
        previous = signal.signal(signal.SIGTERM, _interrupt)  # a timeout's SIGTERM ends the ranks too
        try:
            while not context.join(grace_period=GRACE_S):
                pass
        except mp.ProcessExitedException as err:  # join has already ended every other rank
            first_failure = (err.error_index, err.exit_code)
        except mp.ProcessRaisedException as err:  # not expected: _rank_main reports and exits itself
            first_failure = (err.error_index, 1)
        except KeyboardInterrupt:
            for process in context.processes:
                process.kill()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        reports = _read_reports(Path(folder), world)
    return _verdict(reports, first_failure)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _read_reports(folder: Path, world: int) -> list[RankReport]:
    reports = []
    for index in range(world):
        path = folder / f"rank{index}.json"
        if path.is_file():
            reports.append(RankReport(**json.loads(path.read_text(encoding="utf-8"))))
    return reports


def _verdict(reports: list[RankReport], first_failure: tuple[int, int] | None) -> int:
    failed = [r for r in reports if r.code != 0]
    if not failed and first_failure is None:
        return 0
    said = sorted((r for r in failed if r.message), key=lambda r: (not r.domain, r.at))
    pick = said[0] if said else None
    if pick is None:
        if failed:  # the command already said why (e.g. verify's table): only the exit code is left
            return failed[0].code
        index, code = first_failure
        raise DistributedError(
            f"rank {index} ended without a report (exit code {code}); every other rank was stopped.",
            "Re-run with {settings.debug=True}; a negative code is the signal that ended it (-9: the machine ran out of memory).",
        )
    same = all(r.message == pick.message for r in said)
    error = DistributedError(pick.message if same else f"rank {pick.rank}: {pick.message}")
    error.exit_code = pick.code
    raise error
