"""The decode step's attention mask as one kernel: `torch.ops.cugraph_accel.decode_causal_mask`.

For one query token per row at cache position `p` over a static cache of `kv_length` slots, HF's sdpa mask
(transformers.masking_utils.sdpa_mask under create_causal_mask) is

    allowed[b, 0, 0, s] = (s <= p) & padding[b, s].bool()        for s < kv_length

which HF builds with ~11 small kernels (a cast, 4 arange, 2 add, a fill, le, 2 and, an index). Here it is
one elementwise kernel over [b, kv_length]: a Triton kernel on CUDA (and under the Triton interpreter, for
the CPU tests), the torch expression above elsewhere. An opaque custom op, like decode_attention, so that
the CPU emulation of a graph (and a dispatch mode counting a step's ops) sees one op, not its parts.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no triton: the torch expression everywhere
    triton = None

OP_NAME = "cugraph_accel::decode_causal_mask"
BLOCK = 1024  # slots per program: one program covers a row of most context buckets
# Under the Triton interpreter (TRITON_INTERPRET=1, CPU tests) the kernel runs on CPU tensors too.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


if triton is not None:

    @triton.jit
    def _decode_mask_kernel(padding_ptr, position_ptr, out_ptr, kv_length, padding_stride, BLOCK: tl.constexpr):
        """Program (row, block): allowed = slot <= position & padding != 0 for BLOCK slots of one row."""
        row = tl.program_id(0)
        slots = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = slots < kv_length
        position = tl.load(position_ptr)
        padding = tl.load(padding_ptr + row * padding_stride + slots, mask=inside, other=0)
        allowed = (slots <= position) & (padding != 0)
        tl.store(out_ptr + row * kv_length + slots, allowed, mask=inside)


def reference(padding: torch.Tensor, position: torch.Tensor, kv_length: int) -> torch.Tensor:
    """The mask by torch ops: bool [b, 1, 1, kv_length]."""
    slots = torch.arange(kv_length, device=padding.device)
    allowed = (slots <= position.reshape(())) & (padding[:, :kv_length] != 0)
    return allowed[:, None, None, :].contiguous()


def _runs_triton(padding: torch.Tensor) -> bool:
    return triton is not None and (padding.is_cuda or INTERPRETED)


def launch(padding: torch.Tensor, position: torch.Tensor, kv_length: int) -> torch.Tensor:
    """The mask by the Triton kernel: bool [b, 1, 1, kv_length], contiguous like HF's."""
    batch = padding.shape[0]
    out = torch.empty(batch, 1, 1, kv_length, dtype=torch.bool, device=padding.device)
    if padding.stride(-1) != 1:  # the kernel walks a row's slots one element apart
        padding = padding.contiguous()
    grid = (batch, triton.cdiv(kv_length, BLOCK))
    _decode_mask_kernel[grid](padding, position, out, kv_length, padding.stride(0), BLOCK=BLOCK, num_warps=4)
    return out


def _op(padding: torch.Tensor, position: torch.Tensor, kv_length: int) -> torch.Tensor:
    """padding [b, >= kv_length] (any dtype; nonzero: may attend), position: one int64 element (the query's
    cache slot). Returns bool [b, 1, 1, kv_length]: slot <= position and padding nonzero."""
    if _runs_triton(padding):
        return launch(padding, position, kv_length)
    return reference(padding, position, kv_length)


decode_causal_mask = torch.library.custom_op(OP_NAME, _op, mutates_args=())


@decode_causal_mask.register_fake
def _(padding, position, kv_length):
    return padding.new_empty((padding.shape[0], 1, 1, kv_length), dtype=torch.bool)
