"""The FP8-weight matmul's definition: the weight dequantized to float32, then the matmul in float32, one rounding
to x's dtype. It is the CPU path (the emulation) and what the kernels are tested against."""

from __future__ import annotations

from torch import Tensor


def dequantize(weight: Tensor, scale: Tensor, block: int | None) -> Tensor:
    """weight [N, K] (float8 e4m3) times its scales, float32: per output channel (`block` None, scale [N]) or per
    `block` x `block` block (scale [ceil(N/block), ceil(K/block)], the last blocks cut at N and K)."""
    w = weight.float()
    if block is None:
        return w * scale.float()[:, None]
    n, k = weight.shape
    per_element = scale.float().repeat_interleave(block, dim=0)[:n].repeat_interleave(block, dim=1)[:, :k]
    return w * per_element


def reference_fp8_matmul(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x [..., K] @ dequantize(weight)^T (+ bias) in float32, rounded once to x's dtype: [..., N]."""
    out = x.float() @ dequantize(weight, scale, block).T
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)
