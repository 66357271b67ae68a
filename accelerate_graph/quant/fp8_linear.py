"""Fp8Linear: an nn.Linear whose weight is FP8 (e4m3) with float32 scales (fp8_format.py).

Its forward is one call, `fp8_matmul` (quant/fp8_matmul.py: a custom op, so inductor and CUDA graphs see the
FP8 product as one opaque operation; on the CPU, the dequantized weight and a float32 matmul). The float32
reference (verify/reference.py) promotes the weight to float32 while the layer runs; the layer then runs that
same definition on the exact FP8 values.
"""

from __future__ import annotations

import torch

from accelerate_graph.quant.fp8_format import E4M3, dequantize, quantize, scale_shape, scheme_of
from accelerate_graph.quant.fp8_matmul import fp8_matmul
from accelerate_graph.quant.fp8_reference import reference_fp8_matmul


class Fp8Linear(torch.nn.Module):
    """y = x @ (Q * s).T + b, with Q float8_e4m3fn [out, in] and s float32: [out] per output channel
    (`block` None) or [ceil(out/block), ceil(in/block)] per block. Weight, scale and bias are
    parameters without gradients, so memory and bandwidth counts take their bytes as they are."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, block: int | None, bias: torch.Tensor | None = None):
        super().__init__()
        if weight.dtype != E4M3 or weight.dim() != 2:
            raise ValueError(f"an Fp8Linear weight is a float8_e4m3fn matrix, not {weight.dtype} {tuple(weight.shape)}")
        if tuple(scale.shape) != scale_shape(tuple(weight.shape), block):
            raise ValueError(
                f"scales of shape {tuple(scale.shape)} do not fit a {tuple(weight.shape)} weight with "
                f"{'per-channel scales' if block is None else f'{block} x {block} blocks'} "
                f"(expected {scale_shape(tuple(weight.shape), block)})"
            )
        self.out_features, self.in_features = weight.shape
        self.block = block
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.scale = torch.nn.Parameter(scale.to(torch.float32), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, block: int | None) -> Fp8Linear:
        """The FP8 layer of `linear` (round to nearest, amax / 448 scales), on its device; bias kept."""
        weight, scale = quantize(linear.weight, block)
        return cls(weight, scale, block, linear.bias)

    @property
    def scheme(self) -> str:
        return scheme_of(self.block)

    def dequantized(self) -> torch.Tensor:
        return dequantize(self.weight, self.scale, self.block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != E4M3:  # promoted to float32 by the float32 reference: the exact values
            return reference_fp8_matmul(x, self.weight, self.scale, self.block, self.bias)
        return fp8_matmul(x, self.weight, self.scale, self.block, self.bias)

    def extra_repr(self) -> str:
        scales = "per channel" if self.block is None else f"per {self.block}x{self.block} block"
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3, scales {scales}"
