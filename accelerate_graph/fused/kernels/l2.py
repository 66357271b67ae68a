"""Asking L2 for lines a kernel will load soon (`prefetch.global.L2`): what our kernels launched with PDL
do before they wait for the kernel in front of them, for data that kernel does not write. L2 is where
the GPU's writes meet, so a line prefetched before the previous kernel's write to it is not stale
there: a later load sees the write."""

import triton
import triton.language as tl


@triton.jit
def prefetch_l2(ptrs):
    """One L2 prefetch per address of `ptrs` (a tensor of pointers, any shape); every address must lie
    inside its tensor (clamp the indices, a prefetch cannot be masked)."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )
