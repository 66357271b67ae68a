"""`fp8_matmul(x, weight, scale, block, bias)`: x [..., K] @ (weight * scale)^T (+ bias) for a float8 e4m3
weight [N, K], as one opaque custom op `torch.ops.cugraph_accel.fp8_matmul` (inductor and CUDA graphs see one
call; its fake gives the output's shape).

Scales are float32: one per output channel (`block` None, scale [N]) or one per `block` x `block` block (scale
[ceil(N/block), ceil(K/block)]). The op picks its path per call:
- CUDA, at most SKINNY_MAX_ROWS rows (every decode batch): the Triton skinny kernel (fp8_skinny), which reads
  the weight at one byte an element and accumulates float32 with x as it is (W8A16);
- CUDA, more rows (prefills): the weight dequantized to x's dtype, then cuBLAS;
- elsewhere: the reference (fp8_reference: dequantize, float32 matmul), which is the definition.

Sibling ops fold a decoder layer's neighbours into the skinny kernel (the layer program's FP8 branches,
setting fp8_fold), each exactly the unfolded sequence's rounding wherever the kernel does not run:
- `fp8_norm_matmul(x, norm_weight, eps, ...)`: HF's Llama RMSNorm of x's rows, then the product;
- `fp8_matmul_residual(x, ..., residual)`: residual + the product (rounded first, as eager adds it);
- `fp8_norm_gate_up(x, norm_weight, eps, weight, ...)`: the norm, the product by a merged gate/up weight (gate's
  rows, then up's), then silu(gate) * up, each rounded as eager rounds it.
- `fp8_residual_norm_gate_up(x, weight, ..., residual, norm_weight, eps, gate_up_weight, gate_up_scale)`: the two
  above in a row (o, then the MLP's gate/up), returning both outputs; where gate/up's norm runs apart, the
  first product's split-K finish kernel runs it.
- `fp8_matmul_residual_norm(x, ..., residual, norm_weight, eps, next_n)` and `fp8_normed_matmul(x, normed, ...)`:
  down's residual product handing the next layer's q/k/v its normed rows, where q/k/v's norm runs apart (in
  down's split-K finish kernel where it splits K); `normed_rows_handed_over` is the one rule both follow.
"""

# no `from __future__ import annotations`: torch.library infers the op's schema from the annotations (Optional[...]
# on every supported torch)
from typing import Optional

import torch
from torch import Tensor

from accelerate_graph.quant.fp8_reference import dequantize, reference_fp8_matmul
from accelerate_graph.settings import current

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
    return _body(_rms_norm(x, norm_weight, eps), weight, scale, block, bias)


def _rms_norm(x: Tensor, norm_weight: Tensor, eps: float) -> Tensor:
    """HF's Llama RMSNorm of x's rows where the skinny kernel does not run: on a GPU as one kernel (skinny_matmul's,
    the rounding launch's norm_apart configs give too), else the reference."""
    from accelerate_graph.fused.kernels import skinny_matmul

    if x.device.type == "cuda":
        return skinny_matmul.rms_norm(x, norm_weight, eps)
    return skinny_matmul.reference_rms_norm(x, norm_weight, eps, "llama")


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


def _residual_norm_gate_up_body(
    x: Tensor,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
    residual: Tensor,
    norm_weight: Tensor,
    eps: float,
    gate_up_weight: Tensor,
    gate_up_scale: Tensor,
) -> tuple[Tensor, Tensor]:
    if _skinny_runs(x) and current().fp8_norm_in_finish:
        from accelerate_graph.quant import fp8_skinny

        m, (n, k) = _rows(x), weight.shape
        cfg = fp8_skinny.config_for(m, n, k, block, x.device)
        gate_up_cfg = fp8_skinny.config_for(m, gate_up_weight.shape[0] // 2, n, block, x.device, gate_up=True)
        if fp8_skinny.norm_moves_into_finish(cfg, gate_up_cfg, n, k, block):
            h, normed = fp8_skinny.launch(
                x, weight, scale, block, bias, cfg, residual=residual, next_norm_weight=norm_weight, next_eps=eps
            )
            return h, fp8_skinny.launch(normed, gate_up_weight, gate_up_scale, block, None, gate_up_cfg, gate_up=True)
    h = _matmul_residual_body(x, weight, scale, block, bias, residual)
    return h, _norm_gate_up_body(h, norm_weight, eps, gate_up_weight, gate_up_scale, block)


# The next layer's q/k/v norm handed across the layer boundary (the fp8_norm_in_finish setting, the layer program
# calling the two ops below in turn): where q/k/v's config runs its norm apart, the down product before it runs
# that norm, in its split-K finish kernel where it has one. Both ops decide by this one rule, so the rows handed
# over are read exactly where they were written.
def normed_rows_handed_over(x: Tensor, n: int, block: Optional[int]) -> bool:  # noqa: UP045
    """Whether a q/k/v product of `n` outputs over x's rows takes them normed by the product before it: where
    its skinny kernel's config runs the norm apart, and wherever that kernel does not run (the unfolded
    sequence: the norm, then the product)."""
    if not _skinny_runs(x):
        return True
    from accelerate_graph.quant import fp8_skinny

    return fp8_skinny.config_for(_rows(x), n, x.shape[-1], block, x.device).norm_apart


def _matmul_residual_norm_body(
    x: Tensor,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
    residual: Tensor,
    norm_weight: Tensor,
    eps: float,
    next_n: int,
) -> tuple[Tensor, Tensor]:
    if not normed_rows_handed_over(residual, next_n, block):  # q/k/v norms its rows itself: nothing to hand over
        return _matmul_residual_body(x, weight, scale, block, bias, residual), residual.new_empty(residual.shape)
    if _skinny_runs(x):
        from accelerate_graph.quant import fp8_skinny

        m, (n, k) = _rows(x), weight.shape
        cfg = fp8_skinny.config_for(m, n, k, block, x.device)
        next_cfg = fp8_skinny.config_for(m, next_n, n, block, x.device)
        if fp8_skinny.norm_moves_into_finish(cfg, next_cfg, n, k, block):  # the rule the tune chain times
            return fp8_skinny.launch(
                x, weight, scale, block, bias, cfg, residual=residual, next_norm_weight=norm_weight, next_eps=eps
            )
    h = _matmul_residual_body(x, weight, scale, block, bias, residual)
    return h, _norm_apart(h, norm_weight, eps)


def _norm_apart(x: Tensor, norm_weight: Tensor, eps: float) -> Tensor:
    """The norm a norm_apart config runs before its product (launch's), or off the skinny kernel _rms_norm."""
    if _skinny_runs(x):
        from accelerate_graph.fused.kernels import skinny_matmul

        return skinny_matmul.rms_norm(x, norm_weight, eps)
    return _rms_norm(x, norm_weight, eps)


def _normed_matmul_body(
    x: Tensor,
    normed: Tensor,
    norm_weight: Tensor,
    eps: float,
    weight: Tensor,
    scale: Tensor,
    block: Optional[int],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
) -> Tensor:
    if normed_rows_handed_over(x, weight.shape[0], block):
        return _body(normed, weight, scale, block, bias)
    return _norm_matmul_body(x, norm_weight, eps, weight, scale, block, bias)


torch.library.custom_op("cugraph_accel::fp8_norm_matmul", _norm_matmul_body, mutates_args=()).register_fake(
    lambda x, norm_weight, eps, weight, scale, block, bias: _fake(x, weight, scale, block, bias)
)
torch.library.custom_op("cugraph_accel::fp8_matmul_residual", _matmul_residual_body, mutates_args=()).register_fake(
    lambda x, weight, scale, block, bias, residual: residual.new_empty(residual.shape)
)
torch.library.custom_op("cugraph_accel::fp8_norm_gate_up", _norm_gate_up_body, mutates_args=()).register_fake(
    lambda x, norm_weight, eps, weight, scale, block: x.new_empty((*x.shape[:-1], weight.shape[0] // 2))
)
torch.library.custom_op(
    "cugraph_accel::fp8_matmul_residual_norm", _matmul_residual_norm_body, mutates_args=()
).register_fake(
    lambda x, weight, scale, block, bias, residual, norm_weight, eps, next_n: (
        residual.new_empty(residual.shape),
        residual.new_empty(residual.shape),
    )
)
torch.library.custom_op("cugraph_accel::fp8_normed_matmul", _normed_matmul_body, mutates_args=()).register_fake(
    lambda x, normed, norm_weight, eps, weight, scale, block, bias: _fake(x, weight, scale, block, bias)
)
torch.library.custom_op(
    "cugraph_accel::fp8_residual_norm_gate_up", _residual_norm_gate_up_body, mutates_args=()
).register_fake(
    lambda x, weight, scale, block, bias, residual, norm_weight, eps, gate_up_weight, gate_up_scale: (
        residual.new_empty(residual.shape),
        x.new_empty((*x.shape[:-1], gate_up_weight.shape[0] // 2)),
    )
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
    _check_residual(x, weight, residual)
    return torch.ops.cugraph_accel.fp8_matmul_residual(x, weight, scale, block, bias, residual)


def _check_residual(x: Tensor, weight: Tensor, residual: Tensor) -> None:
    expected = (*x.shape[:-1], weight.shape[0])
    if tuple(residual.shape) != expected or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(f"the residual must be {expected} / {x.dtype} on x's device, got "
                         f"{tuple(residual.shape)} / {residual.dtype} on {residual.device}")  # fmt: skip


def fp8_norm_gate_up(
    x: Tensor, norm_weight: Tensor, eps: float, weight: Tensor, scale: Tensor, block: int | None
) -> Tensor:
    """silu(gate) * up of fp8_norm_matmul's output by a merged gate/up weight [2N, K] (gate's rows, then up's;
    with block scales N a whole number of blocks): [..., N], rounded as eager rounds each step."""
    _check_norm_gate_up(x, norm_weight, weight, scale, block)
    return torch.ops.cugraph_accel.fp8_norm_gate_up(x, norm_weight, float(eps), weight, scale, block)


def _check_norm_gate_up(x: Tensor, norm_weight: Tensor, weight: Tensor, scale: Tensor, block: int | None) -> None:
    check(x, weight, scale, block, None)
    _check_norm_weight(x, norm_weight)
    rows = weight.shape[0]
    if rows % 2 or (block is not None and (rows // 2) % block):
        within = f", N a multiple of the block {block}" if block is not None else ""
        raise ValueError(f"a merged gate/up weight has 2N rows{within}; got {rows}")


def fp8_residual_norm_gate_up(
    x: Tensor,
    weight: Tensor,
    scale: Tensor,
    block: int | None,
    bias: Tensor | None,
    residual: Tensor,
    norm_weight: Tensor,
    eps: float,
    gate_up_weight: Tensor,
    gate_up_scale: Tensor,
) -> tuple[Tensor, Tensor]:
    """(h, g): h = fp8_matmul_residual(x, weight, ..., residual), g = fp8_norm_gate_up(h, norm_weight, eps,
    gate_up_weight, gate_up_scale, block), bit for bit. Where gate/up's config runs its norm apart and the first
    product splits K, the norm runs in that product's finish kernel (the fp8_norm_in_finish setting)."""
    check(x, weight, scale, block, bias)
    _check_residual(x, weight, residual)
    _check_norm_gate_up(residual, norm_weight, gate_up_weight, gate_up_scale, block)
    return torch.ops.cugraph_accel.fp8_residual_norm_gate_up(
        x, weight, scale, block, bias, residual, norm_weight, float(eps), gate_up_weight, gate_up_scale
    )


def fp8_matmul_residual_norm(
    x: Tensor,
    weight: Tensor,
    scale: Tensor,
    block: int | None,
    bias: Tensor | None,
    residual: Tensor,
    norm_weight: Tensor,
    eps: float,
    next_n: int,
) -> tuple[Tensor, Tensor]:
    """(h, normed): h = fp8_matmul_residual(x, weight, ..., residual) bit for bit; normed = HF's Llama RMSNorm of
    h by `norm_weight` where normed_rows_handed_over(h, next_n, block) says the next q/k/v product (`next_n`
    outputs) takes it (the norm's own kernel's bits: in this product's split-K finish kernel where it splits K),
    else memory never written, which fp8_normed_matmul does not read."""
    check(x, weight, scale, block, bias)
    _check_residual(x, weight, residual)
    _check_norm_weight(residual, norm_weight)
    return torch.ops.cugraph_accel.fp8_matmul_residual_norm(
        x, weight, scale, block, bias, residual, norm_weight, float(eps), int(next_n)
    )


def fp8_normed_matmul(
    x: Tensor,
    normed: Tensor,
    norm_weight: Tensor,
    eps: float,
    weight: Tensor,
    scale: Tensor,
    block: int | None,
    bias: Tensor | None = None,
) -> Tensor:
    """fp8_norm_matmul(x, norm_weight, eps, weight, ...) bit for bit, given `normed`: x's rows as
    fp8_matmul_residual_norm (or normed_rows_for) handed them over, read only where normed_rows_handed_over."""
    check(x, weight, scale, block, bias)
    _check_norm_weight(x, norm_weight)
    if normed.shape != x.shape or normed.dtype != x.dtype or normed.device != x.device:
        raise ValueError(f"the normed rows must be shaped and typed as x {tuple(x.shape)} / {x.dtype}")
    return torch.ops.cugraph_accel.fp8_normed_matmul(x, normed, norm_weight, float(eps), weight, scale, block, bias)


def normed_rows_for(x: Tensor, norm_weight: Tensor, eps: float, next_n: int, block: int | None) -> Tensor:
    """What fp8_matmul_residual_norm hands over as `normed` for rows `x` no product came before (the first
    layer's): their norm where normed_rows_handed_over, else memory never written."""
    _check_norm_weight(x, norm_weight)
    if not normed_rows_handed_over(x, next_n, block):
        return torch.empty_like(x)
    return _norm_apart(x, norm_weight, eps)
