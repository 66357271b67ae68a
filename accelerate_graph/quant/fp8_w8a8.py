"""FP8 weights times FP8 activations (W8A8) through cuBLASLt, for row counts above the skinny kernel's.

Activations are quantized per call: per row (amax / 448 a row) for per-channel weights, the row-wise recipe of
`torch._scaled_mm` (compat.torch_internals.scaled_mm); per row and 128 columns for 128 x 128 block weights,
its 1x128 by 128x128 recipe, which cuBLASLt offers on sm90 only. Where neither serves (another GPU for
blocks, K or N not a multiple of 16, block weights whose N is not a multiple of 128 or whose K blocks are not
a multiple of 4 (cuBLASLt reads the weight scales with a leading dimension rounded up to 4, torch's
`_scaled_mm` passes them unpadded), or float32 x), `dequantized_linear` runs instead: the weight dequantized
to x's dtype, then cuBLAS.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from accelerate_graph.compat.torch_internals import scaled_mm
from accelerate_graph.quant.fp8_reference import dequantize

E4M3_MAX = 448.0  # the largest float8 e4m3fn value
# Block weights: scales of 128 x 128 blocks, the only block cuBLASLt's recipe takes.
BLOCK = 128
ROWWISE_FROM = (8, 9)  # row-wise _scaled_mm: Ada and later (CUTLASS below cuBLASLt 12.9, cuBLASLt above)
BLOCKWISE_ON = 9  # the block recipe: sm90 only (torch's _check_deepseek_support)
_TINY = 1e-12  # amax floor: a row of zeros quantizes to zeros, not NaN


def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def serves(x: Tensor, weight: Tensor, block: int | None) -> bool:
    """Whether `w8a8_matmul` runs for these operands on their device (else dequantized_linear)."""
    if x.device.type != "cuda" or x.dtype not in (torch.bfloat16, torch.float16):
        return False
    n, k = weight.shape
    if k % 16 or n % 16:
        return False
    if block is None:
        return _capability(x.device) >= ROWWISE_FROM
    whole_blocks = k % (4 * BLOCK) == 0 and n % BLOCK == 0  # a ragged last block of rows is not GPU-tested
    return block == BLOCK and whole_blocks and _capability(x.device)[0] == BLOCKWISE_ON


def quantize_rows(x2: Tensor) -> tuple[Tensor, Tensor]:
    """x2 [M, K] as float8 e4m3 and its float32 scales [M, 1] (amax / 448 a row): x2 ~ q * scale."""
    amax = x2.abs().amax(dim=-1, keepdim=True).float().clamp(min=_TINY)
    scales = amax / E4M3_MAX
    return (x2.float() / scales).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scales


def quantize_row_blocks(x2: Tensor, rows: int) -> tuple[Tensor, Tensor]:
    """x2 [M, K] (K a multiple of 128) as float8 e4m3 with one float32 scale per row and 128 columns, padded to
    `rows` rows (zeros, scale 1); the scales [rows, K/128] column-major, as the 1x128 recipe reads them."""
    m, k = x2.shape
    groups = x2.float().reshape(m, k // BLOCK, BLOCK)
    scales = groups.abs().amax(dim=-1).clamp(min=_TINY) / E4M3_MAX  # [M, K/128]
    q = (groups / scales[..., None]).clamp(-E4M3_MAX, E4M3_MAX).reshape(m, k).to(torch.float8_e4m3fn)
    if rows > m:
        q = F.pad(q.view(torch.uint8), (0, 0, 0, rows - m)).view(torch.float8_e4m3fn)
        scales = F.pad(scales, (0, 0, 0, rows - m), value=1.0)
    return q, scales.t().contiguous().t()


def w8a8_matmul(x2: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x2 [M, K] @ (weight * scale)^T (+ bias) in x2's dtype, activations quantized here (`serves` holds)."""
    m, n = x2.shape[0], weight.shape[0]
    fused_bias = bias if bias is not None and bias.dtype == x2.dtype and block is None else None
    if block is None:
        q, x_scales = quantize_rows(x2)
        out = scaled_mm(
            q, weight.t(), x_scales, scale.float().reshape(1, n).contiguous(), bias=fused_bias, out_dtype=x2.dtype
        )
    else:
        rows = -(-m // 4) * 4  # the 1x128 scales' leading dimension: 16-byte aligned
        q, x_scales = quantize_row_blocks(x2, rows)
        out = scaled_mm(q, weight.t(), x_scales, scale.float().contiguous().t(), out_dtype=x2.dtype)[:m]
    if bias is not None and fused_bias is None:
        out = (out.float() + bias.float()).to(x2.dtype)
    return out


def dequantized_linear(x2: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x2 @ (weight * scale)^T (+ bias) with the weight dequantized to x2's dtype (a temporary of N x K), cuBLAS."""
    return F.linear(x2, dequantize(weight, scale, block).to(x2.dtype), None if bias is None else bias.to(x2.dtype))
