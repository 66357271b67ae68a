"""The FP8-weight matmul's definition: the weight dequantized to float32, then the matmul in float32, one rounding
to x's dtype. It is the CPU path (the emulation) and what the kernels are tested against, by the measures here."""

from __future__ import annotations

import torch
from torch import Tensor

WIDE_EPS = 2e-6  # the unit against a float32 or float64 reference: about 17 of float32's last places


def dequantize(weight: Tensor, scale: Tensor, block: int | None) -> Tensor:
    """weight [N, K] (float8 e4m3) times its scales, float32: per output channel (`block` None, scale [N]) or per
    `block` x `block` block (scale [ceil(N/block), ceil(K/block)], the last blocks cut at N and K)."""
    w = weight.float()
    if block is None:
        return w * scale.float()[:, None]
    n, k = weight.shape
    per_element = scale.float().repeat_interleave(block, dim=0)[:n].repeat_interleave(block, dim=1)[:, :k]
    return w * per_element


def reference_fp8_sums(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x [..., K] @ dequantize(weight)^T (+ bias) in float32, not rounded: [..., N]."""
    out = x.float() @ dequantize(weight, scale, block).T
    if bias is not None:
        out = out + bias.float()
    return out


def reference_fp8_matmul(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x [..., K] @ dequantize(weight)^T (+ bias) in float32, rounded once to x's dtype: [..., N]."""
    return reference_fp8_sums(x, weight, scale, block, bias).to(x.dtype)


def _floored(t: Tensor) -> Tensor:
    """|t|, raised to its mean magnitude where smaller: an element near zero is judged at the tensor's scale."""
    magnitude = t.abs()
    return torch.maximum(magnitude, magnitude.mean())


def error_ulps(got: Tensor, want: Tensor) -> float:
    """The largest error of `got` in units of the last place of `want`'s dtype (WIDE_EPS for float32 and
    float64), against the larger of each element and the mean magnitude. NaN where `got` has one."""
    eps = WIDE_EPS if want.dtype in (torch.float32, torch.float64) else torch.finfo(want.dtype).eps
    return ((got.float() - want.float()).abs() / (eps * _floored(want.float()))).max().item()


def gated_error_ulps(got: Tensor, gate: Tensor, up: Tensor) -> float:
    """The largest error of `got` (silu(gate) * up in bf16 or fp16) against the exact silu(gate) * up of the
    reference's float32 sums `gate` and `up` (unrounded, [..., N/2] each), in units of got's last place carried
    through the activation: a unit is one last place of gate, of up and of the output, added as independent
    errors (root of the sum of squares), so a kernel's roundings (gate, up, silu(gate), the product; half a
    place each) cost at most 1.22, and a relative error d in its sums at most about d / eps, at any gate. NaN
    where `got` has one."""
    g, u = gate.float(), up.float()
    sigmoid = torch.sigmoid(g)
    act = g * sigmoid
    out = act * u
    slope = sigmoid * (1 + g * (1 - sigmoid))  # silu'(g)
    # out moves by |u silu'(g)| * dg for a change dg of gate, by |silu(g)| * du for one of up: one last place
    # (eps times the magnitude, floored at the mean as error_ulps does) of each and one of the output's own
    # rounding, as independent errors, make one unit (their plain sum would let a 4% wrong channel through)
    spread = ((u * slope).abs() * _floored(g)).hypot(act.abs() * _floored(u)).hypot(_floored(out))
    unit = torch.finfo(got.dtype).eps * spread
    return ((got.float() - out).abs() / unit).max().item()
