"""The FP8 weight format: e4m3 values and float32 scales, per output channel or per 128 x 128 block.

A weight W [N, K] is stored as Q = round(W / s) in float8_e4m3fn and s = amax / 448 (e4m3's largest
finite value), the amax taken over an output channel (scale [N]) or a block (scale [ceil(N/128),
ceil(K/128)]). W ~= Q * s: the scale is what Hugging Face's fine-grained FP8 checkpoints call
`weight_scale_inv`, so their tensors are ours as they are.
"""

from __future__ import annotations

import math

import torch

from accelerate_graph.quant.fp8_reference import dequantize  # noqa: F401 - Q * s in float32: the format's inverse

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BLOCK = 128
# --weights: the model's own weights, FP8 with a scale per output channel, FP8 with a scale per block
WEIGHTS = ("model", "fp8", "fp8-block")
SCHEME_BLOCK = {"fp8": None, "fp8-block": BLOCK}


def scale_shape(shape: tuple[int, int], block: int | None) -> tuple[int, ...]:
    rows, cols = shape
    return (rows,) if block is None else (math.ceil(rows / block), math.ceil(cols / block))


def expand_scale(scale: torch.Tensor, shape: tuple[int, int], block: int | None) -> torch.Tensor:
    """The scale of each weight element, [N, K] (a broadcastable [N, 1] per channel)."""
    if block is None:
        return scale.reshape(-1, 1)
    rows, cols = shape
    return scale.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]


def _amax(weight: torch.Tensor, block: int | None) -> torch.Tensor:
    magnitude = weight.abs()
    if block is None:
        return magnitude.amax(dim=1)
    rows, cols = weight.shape
    padded = torch.nn.functional.pad(magnitude, (0, -cols % block, 0, -rows % block))  # zeros: no amax changes
    blocks = padded.reshape(padded.shape[0] // block, block, padded.shape[1] // block, block)
    return blocks.amax(dim=(1, 3))


def quantize(weight: torch.Tensor, block: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q float8_e4m3fn [N, K], scale float32) of `weight` [N, K]: round to nearest, amax / 448 scales.
    An all-zero channel or block gets scale 1 (its values are zeros either way)."""
    if weight.dim() != 2:
        raise ValueError(f"an FP8 weight is a matrix, not a tensor of shape {tuple(weight.shape)}")
    w = weight.detach().to(torch.float32, copy=True)  # a copy of its own: divided in place below
    amax = _amax(w, block)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    # in place: one float32 copy of the weight at a time (an 8B's gate/up is 235 MB in float32)
    return w.div_(expand_scale(scale, w.shape, block)).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def scheme_of(block: int | None) -> str:
    return "fp8" if block is None else "fp8-block"
