"""Arrival counters: the last program of a group to finish runs the group's second pass itself (split-K's
finish, skinny_matmul) instead of a second kernel.

Each program stores its part, fences (`fence_gpu`), counts itself in with an acq_rel atomic and, if it
arrived last, resets the counter to zero and reads the others' parts from L2 (`.cg` loads). One zeroed
buffer per device serves every launch and every graph replay, since each launch leaves it zero again.
Two launches never count at once: our kernels run one after another on one stream, and a kernel launched
early under PDL counts only after its `gdc_wait`, i.e. after the kernel before it has ended.
"""

import torch
import triton
import triton.language as tl

COUNTERS = 1 << 16  # groups one launch may count (a launch with more runs its second kernel)
_counters: dict[torch.device, torch.Tensor] = {}


def arrival_counters(device: torch.device) -> torch.Tensor | None:
    """The device's zeroed counters; None where they do not exist yet and a CUDA graph is being captured
    (allocating then would record the zeroing in the graph and take the buffer from its private pool):
    the caller then runs its second kernel. Fused mode makes them before it captures
    (skinny_matmul.prepare_split_finish)."""
    if device not in _counters:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        _counters[device] = torch.zeros(COUNTERS, dtype=torch.int32, device=device)
    return _counters[device]


@triton.jit
def fence_gpu(any_tensor):
    """fence.acq_rel.gpu in every thread (the CUDA threadFenceReduction pattern's __threadfence)."""
    tl.inline_asm_elementwise(
        "fence.acq_rel.gpu; mov.u32 $0, $1;", "=r,r", [any_tensor], dtype=tl.int32, is_pure=False, pack=1
    )
