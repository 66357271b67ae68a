"""This process's place in a tensor-parallel run: join the process group, pick the device, align.

The environment names the rank the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT): our own launcher sets the same variables, so both ways in share this code.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accelerate_graph.common.errors import BadOptionError, DeviceError, DistributedError, option
from accelerate_graph.settings import TP_WORKER_ENV

TIMEOUT_ENV = "CUGRAPH_ACCEL_DIST_TIMEOUT"  # seconds the rendezvous (and any collective) may wait
DEFAULT_TIMEOUT_S = 300.0
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
WORKER_ENV = TP_WORKER_ENV  # set in every rank: the command runs its body, not the launcher


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


_current: RankInfo | None = None


def current() -> RankInfo | None:
    """This process's rank in a run of more than one process, else None."""
    return _current


def in_rank() -> bool:
    """True inside a rank of a tensor-parallel run (started by this tool, or by torchrun through it)."""
    return os.environ.get(WORKER_ENV) == "1"


def is_main_rank() -> bool:
    """True on rank 0 and outside any tensor-parallel run: the one process that prints and writes.
    Before the rank joins its group, the environment says which rank it will be."""
    if _current is not None:
        return _current.rank == 0
    return not in_rank() or os.environ.get("RANK", "0") == "0"


def in_torchrun() -> bool:
    return all(os.environ.get(name) for name in TORCHRUN_VARS)


def timeout_seconds() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise BadOptionError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds.") from None
    if value <= 0:
        raise BadOptionError(f"{TIMEOUT_ENV}={text!r} must be above 0 seconds.")
    return value


def check_world_fits(world_size: int, device_type: str) -> None:
    """N GPUs for N ranks; on the CPU (gloo) any number of processes share the machine."""
    if world_size < 1:
        raise BadOptionError(f"{option('tp', world_size)} must be at least 1.")
    if device_type == "cuda" and world_size > torch.cuda.device_count():
        raise DeviceError(
            f"{option('tp', world_size)} needs {world_size} GPUs, but {torch.cuda.device_count()} are visible.",
            f"Use {option('tp', max(torch.cuda.device_count(), 1))} or fewer, or {option('device', 'cpu')} (gloo).",
        )


def _env_int(name: str, default: int | None = None) -> int:
    text = os.environ.get(name)
    if text is None and default is not None:
        return default
    try:
        return int(text or "")
    except ValueError:
        raise DistributedError(f"environment variable {name}={text!r} is not a whole number.") from None


def join(world_size: int, device: torch.device) -> RankInfo:
    """Join (once per process) the group the environment describes; returns this rank's place.

    nccl on CUDA (one GPU per local rank), gloo on the CPU."""
    global _current
    if _current is not None:
        return _current
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK", _env_int("RANK"))
    if world != world_size:
        raise BadOptionError(
            f"{option('tp', world_size)} does not match this torchrun's WORLD_SIZE={world}.",
            f"Use {option('tp', world)}.",
        )
    check_world_fits(world, device.type)
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        from accelerate_graph.core.backends.cuda import claim_capture_stream  # CUDA only

        claim_capture_stream(device)  # before NCCL's streams run work (core/backends/cuda.py capture_stream)
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timeout_seconds()
    try:
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
    except Exception as err:  # noqa: BLE001 - the store raises DistStoreError, RuntimeError, TimeoutError
        raise _rendezvous_error(err, world, timeout) from None
    _current = RankInfo(rank, world, local, device)
    return _current


def _rendezvous_error(err: Exception, world: int, timeout: float) -> DistributedError:
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if "timed out" in text.lower() or "timeout" in text.lower():
        return DistributedError(
            f"rendezvous at {where} timed out after {timeout:.0f} s: not all {world} ranks joined ({text[:160]}).",
            f"Start every rank (`torchrun --nproc-per-node {world}`), or raise {TIMEOUT_ENV}.",
        )
    return DistributedError(f"cannot join the {world}-rank process group at {where}: {text[:200]}")


def barrier() -> None:
    """All ranks meet here; a no-op outside a tensor-parallel run."""
    if _current is None or not dist.is_initialized():
        return
    if _current.device.type == "cuda":
        dist.barrier(device_ids=[_current.device.index])
    else:
        dist.barrier()


def gather_objects(item) -> list:
    """Every rank's `item`, in rank order (one element outside a run)."""
    if _current is None or not dist.is_initialized():
        return [item]
    items = [None] * _current.world_size
    dist.all_gather_object(items, item)
    return items


def forget() -> None:
    """After teardown: this process is no longer part of a run."""
    global _current
    _current = None
