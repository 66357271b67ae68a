"""The sum over the ranks after each row-wise layer: NCCL's all-reduce, or a one-shot kernel.

A decode step's all-reduces are tiny (batch x hidden values: 8 KB at batch 1 of an 8B model) and there
are two per layer, so their latency, not their bandwidth, is what a tensor-parallel step pays. The
one-shot kind is the technique of vLLM's custom all-reduce, through torch's symmetric memory: every
rank's buffer is mapped into its peers, and one kernel copies this rank's part in, meets the peers at
a barrier, sums every peer's buffer over peer-to-peer loads (never NVLink multicast) and meets them
again. It is our own custom op, functional (a new tensor out), so a CUDA graph records its one kernel
and inductor (--fuse) calls it as an opaque kernel. Messages above the buffer (a prompt's prefill),
and any run off CUDA, take the plain collective of the process group inside the same op.

The kind is the allreduce setting (auto, the default, nccl or oneshot; `--allreduce KIND` sets it), which
the launcher passes to every rank in its environment, so ranks launched by torchrun choose the same way. `auto` is
oneshot on CUDA, where it was faster at every batch (8B, 2 H200s, 2026-11-30: 4.34 / 4.53 / 5.10 ms
fused at batch 1 / 8 / 32 against NCCL's 4.69 / 4.97 / 5.55), and NCCL (or gloo) elsewhere or when any
rank cannot map the peers' buffers (the ranks agree on it, or their collectives would not match).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.errors import BadOptionError, DistributedError, first_line, option

KINDS = ("auto", "nccl", "oneshot")
ONE_SHOT_MAX_BYTES = 1 << 20  # per message: 128 rows of a 4096-wide model in bf16; larger ones take NCCL
ALIGN_BYTES = 16  # the kernel's vector width: input and buffer must share this alignment

# Set by NCCL, PyTorch's symmetric memory and NVSHMEM in every rank before any communicator exists:
# NVLink multicast (NVLS) objects have taken shared hosts' GPUs out of service; one-shot needs none.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

_buffers: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}  # this rank's rendezvoused buffers
_kind = "nccl"


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise BadOptionError(
            f"{option('settings.allreduce', kind)} is not one of {', '.join(KINDS)}.",
            "Use {settings.allreduce='nccl'}.",
        )
    return kind


def requested_kind(settings: engine_settings.Settings | None = None) -> str:
    """What the allreduce setting asks for (`settings`, else the settings in use)."""
    return check_kind((settings or engine_settings.current()).allreduce)


def turn_off_multicast() -> None:
    os.environ.update(NO_MULTICAST_ENV)


def current_kind() -> str:
    return _kind


def set_up(kind: str, device: torch.device, dtype: torch.dtype) -> str:
    """Make `kind` this rank's all-reduce (a collective: every rank calls it at the same point, after
    joining the group, before any step runs); returns what the plan records."""
    global _kind
    if check_kind(kind) == "auto":
        _kind = "oneshot" if device.type == "cuda" and _every_rank_maps(device, dtype) else "nccl"
        return _kind
    _kind = kind
    if _kind == "oneshot" and device.type == "cuda" and (device, dtype) not in _buffers:
        _buffers[(device, dtype)] = _symmetric_buffer(device, dtype)
    return _kind


def _every_rank_maps(device: torch.device, dtype: torch.dtype) -> bool:
    """Map this rank's one-shot buffer; True only if every rank could (a collective: all call it)."""
    try:
        if (device, dtype) not in _buffers:
            _buffers[(device, dtype)] = _symmetric_buffer(device, dtype)
        mapped = 1
    except DistributedError:
        mapped = 0
    flag = torch.tensor([mapped], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if not int(flag.item()):
        _buffers.pop((device, dtype), None)
        return False
    return True


def _symmetric_buffer(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    from accelerate_graph.compat.torch_internals import symmetric_empty, symmetric_rendezvous

    turn_off_multicast()  # the launcher set it already; a rank under someone else's launcher too
    try:
        buffer = symmetric_empty(ONE_SHOT_MAX_BYTES // dtype.itemsize, dtype, device)
        symmetric_rendezvous(buffer, dist.group.WORLD.group_name)
    except Exception as err:  # noqa: BLE001 - any failure of the alpha API becomes one line
        raise DistributedError(
            f"{option('settings.allreduce', 'oneshot')}: torch's symmetric memory could not map the peers' buffers on {device} "
            f"({first_line(err, 200)}).",
            "Use {settings.allreduce='nccl'}.",
        ) from None
    return buffer


def _one_shot_fits(x: torch.Tensor, buffer: torch.Tensor | None) -> bool:
    nbytes = x.numel() * x.element_size()
    return buffer is not None and 0 < x.numel() <= buffer.numel() and nbytes % ALIGN_BYTES == 0


@torch.library.custom_op("cugraph_accel::tp_all_reduce", mutates_args=())
def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The sum of `x` over the ranks of the default group, as a new tensor."""
    buffer = _buffers.get((x.device, x.dtype))
    if not _one_shot_fits(x, buffer):
        total = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total)
        return total
    from accelerate_graph.compat.torch_internals import one_shot_all_reduce_copy

    local = x.contiguous()
    if (local.storage_offset() * local.element_size()) % ALIGN_BYTES:
        local = local.clone()  # the kernel copies with 16-byte vectors: same alignment as the buffer's
    view = buffer.narrow(0, 0, local.numel()).view(local.shape)
    return one_shot_all_reduce_copy(view, local, dist.group.WORLD.group_name)


@tp_all_reduce.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def summed(x: torch.Tensor) -> torch.Tensor:
    """`x` summed over the ranks with this rank's kind: NCCL in place, or the one-shot op (a new tensor)."""
    if _kind == "oneshot":
        return torch.ops.cugraph_accel.tp_all_reduce(x)
    dist.all_reduce(x)  # in place: inside a CUDA graph the reduction is replayed with the step
    return x


def forget() -> None:
    """Drop the buffers (teardown, before the group goes) and return to NCCL."""
    global _kind
    _buffers.clear()
    _kind = "nccl"
