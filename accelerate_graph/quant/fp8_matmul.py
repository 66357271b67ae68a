"""`fp8_matmul(x, weight, scale, block, bias)`: x [..., K] @ (weight * scale)^T (+ bias) for a float8 e4m3
weight [N, K], as one opaque custom op `torch.ops.cugraph_accel.fp8_matmul` (inductor and CUDA graphs see one
call; its fake gives the output's shape).

Scales are float32: one per output channel (`block` None, scale [N]) or one per `block` x `block` block (scale
[ceil(N/block), ceil(K/block)]). The op picks its path per call:
- CUDA, at most SKINNY_MAX_ROWS rows (every decode batch): the Triton skinny kernel (fp8_skinny), which reads
  the weight at one byte an element and accumulates float32 with x as it is (W8A16);
- CUDA, more rows (prefills): the weight dequantized to x's dtype, then cuBLAS;
- elsewhere: the reference (fp8_reference: dequantize, float32 matmul), which is the definition.

Two sibling ops fold a decoder layer's neighbours into the skinny kernel (the layer program's FP8 branches,
setting fp8_fold), each exactly the unfolded sequence's rounding wherever the kernel does not run:
- `fp8_norm_matmul(x, norm_weight, eps, ...)`: HF's Llama RMSNorm of x's rows, then the product;
- `fp8_matmul_residual(x, ..., residual)`: residual + the product (rounded first, as eager adds it);
- `fp8_norm_gate_up(x, norm_weight, eps, weight, ...)`: the norm, the product by a merged gate/up weight (gate's
  rows, then up's), then silu(gate) * up, each rounded as eager rounds it.
"""

# no `from __future__ import annotations`: torch.library infers the op's schema from the annotations (Optional[...]
# on every supported torch)
from typing import Optional

import torch
from torch import Tensor

from accelerate_graph.quant.fp8_reference import dequantize, reference_fp8_matmul

# Rows up to which the skinny kernel runs: every decode batch keeps its activations in x's dtype. Quantizing them
# to e4m3 too (cuBLASLt's W8A8) put an 8B's batch-32 logits 8x further from the float32 reference than batch 9's.
SKINNY_MAX_ROWS = 64
WEIGHT_ELEMENTS_LIMIT = 2**31  # the skinny kernel's offsets are 32-bit
DEQUANTIZE_ROWS = 1024  # above the skinny kernel's rows: weight rows dequantized in float32 at a time
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _rows(x: Tensor) -> int:
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def skinny_kernel_runs(x: Tensor) -> bool:
    """Whether x's device runs the skinny kernel (CUDA, or the interpreter where a kernel test asked), its
    rows aside: where the folded ops are worth calling."""
    from accelerate_graph.quant import fp8_skinny

    return fp8_skinny.runs_triton(x)


def _skinny_runs(x: Tensor) -> bool:
    """Whether this call runs the skinny kernel: its device does, at decode's rows."""
    return skinny_kernel_runs(x) and 0 < _rows(x) <= SKINNY_MAX_ROWS


def _body(x: Tensor, weight: Tensor, scale: Tensor, block: Optional[int], bias: Optional[Tensor]) -> Tensor:  # noqa: UP045
    if _skinny_runs(x):
        # the kernel's module loads on the first call: a model loaded with FP8 layers imports no Triton code until then
        from accelerate_graph.quant import fp8_skinny

        return fp8_skinny.launch(x, weight, scale, block, bias)
    if x.device.type != "cuda":
        return reference_fp8_matmul(x, weight, scale, block, bias)
    return dequantized_linear(x, weight, scale, block, bias)


def dequantized_linear(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> Tensor:
    """x @ (weight * scale)^T (+ bias) with the weight dequantized to x's dtype (a temporary of N x K), cuBLAS.
    The float32 products are made DEQUANTIZE_ROWS rows at a time: an 8B's gate/up whole would add 470 MB."""
    dequantized = torch.empty(weight.shape, dtype=x.dtype, device=x.device)
    rows = DEQUANTIZE_ROWS if block is None else max(block, DEQUANTIZE_ROWS // block * block)  # whole blocks
    for start in range(0, weight.shape[0], rows):
        end = start + rows
        scales = scale[start:end] if block is None else scale[start // block : -(-end // block)]
        dequantized[start:end] = dequantize(weight[start:end], scales, block)
    return torch.nn.functional.linear(x, dequantized, None if bias is None else bias.to(x.dtype))


def _fake(x: Tensor, weight: Tensor, scale: Tensor, block: Optional[int], bias: Optional[Tensor]) -> Tensor:  # noqa: UP045
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


torch.library.custom_op("cugraph_accel::fp8_matmul", _body, mutates_args=()).register_fake(_fake)


def _norm_matmul_body(
    x: Tensor,
    norm_weight: Tensor,
    eps: float,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
) -> Tensor:
    if _skinny_runs(x):
        from accelerate_graph.quant import fp8_skinny

        return fp8_skinny.launch(x, weight, scale, block, bias, norm_weight=norm_weight, eps=eps)
    from accelerate_graph.fused.kernels import skinny_matmul

    # more rows on a GPU: the norm as one kernel (skinny_matmul's, the same rounding), then the op's other paths
    if x.device.type == "cuda":
        xn = skinny_matmul.rms_norm(x, norm_weight, eps)
    else:
        xn = skinny_matmul.reference_rms_norm(x, norm_weight, eps, "llama")
    return _body(xn, weight, scale, block, bias)


def _matmul_residual_body(
    x: Tensor,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
    residual: Tensor,
) -> Tensor:
    if _skinny_runs(x):
        from accelerate_graph.quant import fp8_skinny

        return fp8_skinny.launch(x, weight, scale, block, bias, residual=residual)
    return residual + _body(x, weight, scale, block, bias)


def _norm_gate_up_body(
    x: Tensor,
    norm_weight: Tensor,
    eps: float,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
) -> Tensor:
    if _skinny_runs(x):
        from accelerate_graph.quant import fp8_skinny

        return fp8_skinny.launch(x, weight, scale, block, None, norm_weight=norm_weight, eps=eps, gate_up=True)
    gate, up = _norm_matmul_body(x, norm_weight, eps, weight, scale, block, None).chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


torch.library.custom_op("cugraph_accel::fp8_norm_matmul", _norm_matmul_body, mutates_args=()).register_fake(
    lambda x, norm_weight, eps, weight, scale, block, bias: _fake(x, weight, scale, block, bias)
)
torch.library.custom_op("cugraph_accel::fp8_matmul_residual", _matmul_residual_body, mutates_args=()).register_fake(
    lambda x, weight, scale, block, bias, residual: residual.new_empty(residual.shape)
)
torch.library.custom_op("cugraph_accel::fp8_norm_gate_up", _norm_gate_up_body, mutates_args=()).register_fake(
    lambda x, norm_weight, eps, weight, scale, block: x.new_empty((*x.shape[:-1], weight.shape[0] // 2))
)


def check(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None) -> None:
    """Misuse by a caller in this package (not a user error): one line naming the argument."""
    if weight.dim() != 2 or weight.dtype != torch.float8_e4m3fn:
        raise ValueError(f"the weight must be 2-D float8_e4m3fn, got {tuple(weight.shape)} / {weight.dtype}")
    n, k = weight.shape
    if x.shape[-1] != k or x.dtype not in INPUT_DTYPES:
        raise ValueError(f"x {tuple(x.shape)} / {x.dtype} does not fit a weight of K={k} (bf16, fp16 or fp32)")
    if not weight.is_contiguous():
        raise ValueError("the weight must be contiguous (row-major [N, K])")
    if n * k >= WEIGHT_ELEMENTS_LIMIT:
        raise ValueError("weights of 2**31 elements or more are not supported (32-bit offsets)")
    if block is None:
        expected = (n,)
    elif block < 16 or block % 16:
        raise ValueError(f"block must be a positive multiple of 16 (128 for the usual block scales), got {block}")
    else:
        expected = (-(-n // block), -(-k // block))
    if scale.dtype != torch.float32 or tuple(scale.shape) != expected:
        raise ValueError(f"scale must be float32 of shape {expected} for block={block}, got {tuple(scale.shape)}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
    if any(t.device != x.device for t in (weight, scale, *([bias] if bias is not None else []))):
        raise ValueError(f"x, weight, scale and bias must be on one device (x is on {x.device})")


def fp8_matmul(x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None = None) -> Tensor:
    """x [..., K] (bf16, fp16 or fp32) @ (weight [N, K] float8 e4m3 * scale)^T (+ bias [N]) in x's dtype,
    [..., N]. scale: float32 [N] (`block` None) or [ceil(N/block), ceil(K/block)] (block scales, block 128)."""
    check(x, weight, scale, block, bias)
    return torch.ops.cugraph_accel.fp8_matmul(x, weight, scale, block, bias)


def fp8_norm_matmul(
    x: Tensor, norm_weight: Tensor, eps: float, weight: Tensor, scale: Tensor, block: int | None, bias=None
) -> Tensor:
    """fp8_matmul of HF's Llama RMSNorm of x (skinny_matmul.reference_rms_norm's rounding; norm_weight [K] in
    x's dtype), the norm folded into the skinny kernel where it runs."""
    check(x, weight, scale, block, bias)
    _check_norm_weight(x, norm_weight)
    return torch.ops.cugraph_accel.fp8_norm_matmul(x, norm_weight, float(eps), weight, scale, block, bias)


def _check_norm_weight(x: Tensor, norm_weight: Tensor) -> None:
    if tuple(norm_weight.shape) != (x.shape[-1],) or norm_weight.dtype != x.dtype or norm_weight.device != x.device:
        raise ValueError(f"the norm weight must be ({x.shape[-1]},) / {x.dtype} on x's device, got "
                         f"{tuple(norm_weight.shape)} / {norm_weight.dtype} on {norm_weight.device}")  # fmt: skip


def fp8_matmul_residual(
    x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None, residual: Tensor
) -> Tensor:
    """residual + fp8_matmul(x, ...), the product rounded to x's dtype before the add (eager's rounding), the
    add folded into the skinny kernel where it runs."""
    check(x, weight, scale, block, bias)
    expected = (*x.shape[:-1], weight.shape[0])
    if tuple(residual.shape) != expected or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(f"the residual must be {expected} / {x.dtype} on x's device, got "
                         f"{tuple(residual.shape)} / {residual.dtype} on {residual.device}")  # fmt: skip
    return torch.ops.cugraph_accel.fp8_matmul_residual(x, weight, scale, block, bias, residual)


def fp8_norm_gate_up(
    x: Tensor, norm_weight: Tensor, eps: float, weight: Tensor, scale: Tensor, block: int | None
) -> Tensor:
    """silu(gate) * up of fp8_norm_matmul's output by a merged gate/up weight [2N, K] (gate's rows, then up's;
    with block scales N a whole number of blocks): [..., N], rounded as eager rounds each step."""
    check(x, weight, scale, block, None)
    _check_norm_weight(x, norm_weight)
    rows = weight.shape[0]
    if rows % 2 or (block is not None and (rows // 2) % block):
        within = f", N a multiple of the block {block}" if block is not None else ""
        raise ValueError(f"a merged gate/up weight has 2N rows{within}; got {rows}")
    return torch.ops.cugraph_accel.fp8_norm_gate_up(x, norm_weight, float(eps), weight, scale, block)
