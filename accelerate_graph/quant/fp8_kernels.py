"""Triton code of the FP8-weight skinny matmul; fp8_skinny launches it (read that module first).

out[M, N] = x[M, K] @ (W[N, K] * scale)^T (+ bias) for few rows: W in float8 e4m3 (one byte an element, half
of bf16's bytes), converted in registers (by integer ops for bf16 tensor cores), or not at all (E4M3_DOT: e4m3
tensor cores, x split exactly into two e4m3 terms), float32 accumulation. A program
owns BLOCK_N output columns of BLOCK_M rows and walks K (its share when split-K is on: then it writes float32
partial sums and `fp8_finish_kernel` adds them). Weight tiles are loaded row-major with a mask that does not
vary along K (EVEN_K), so each thread reads 16 contiguous bytes at once where K is a multiple of 16.

Scales (BLOCKWISE off: one per output channel, applied once to the sums; on: one per SCALE_BLOCK x SCALE_BLOCK
block, S_COLS of them a block row): a program's BLOCK_N rows lie in one block of rows (the launch keeps
SCALE_BLOCK % BLOCK_N == 0), so a K tile needs only the block scales of its columns. Without tensor cores they
multiply the activation (x * s per column, then the products with W); with tensor cores a tile lies in one
block of columns (SCALE_BLOCK % BLOCK_K == 0) and its product is scaled once before it is added.

X_APART (E4M3_DOT): x's two e4m3 terms and their scales come from `fp8_x_terms_kernel`, launched first (with
the norm where it is folded), and the loop loads them as copied rather than splitting each tile itself.

Folds (fp8_matmul's sibling ops): NORM 1 normalises x's rows as they are loaded (HF's Llama RMSNorm, the row
norms and roundings of skinny_kernels, whose helpers run here); HAS_RES adds a residual after the product's
rounding (out = round(round(x @ W^T + bias) + residual), eager's roundings); GATE_UP multiplies by a merged
gate/up weight and writes silu(gate) * up.

Arithmetic is in float32 on loaded values; the output goes through skinny_kernels' epilogue and its `_round`
(the interpreter truncates float32 -> bf16 casts, the GPU rounds to nearest even).
"""

import os

import triton
import triton.language as tl

from accelerate_graph.fused.kernels.pdl import gdc_launch_dependents, gdc_wait
from accelerate_graph.fused.kernels.skinny_kernels import (
    _epilogue,
    _finish_block,
    _norm_weights,
    _normed_by,
    _rows_rstd,
)

# @triton.jit picks the interpreter at decoration, i.e. when this module is imported.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _prefetch_first_block(w_ptr, pid_n, pid_s, N, K, K_PER_SPLIT, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Ask L2 for the program's first [BLOCK_N, BLOCK_K] block of W (one request per 128-byte line, 128 fp8
    values) before the PDL wait: nothing before us writes W. Indices are clamped, never masked."""
    LINES: tl.constexpr = (BLOCK_K + 127) // 128
    rows = tl.minimum(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N - 1)
    cols = tl.minimum(pid_s * K_PER_SPLIT + tl.arange(0, LINES) * 128, K - 1)
    ptrs = w_ptr + rows[:, None].to(tl.int64) * K + cols[None, :]
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _x_tile(x_ptr, offs_m, offs_k, M, K, EVEN_K: tl.constexpr):
    """x[offs_m, offs_k] as stored (x's dtype)."""
    if EVEN_K:
        mask = (offs_m < M)[:, None]
    else:
        mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
    return tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=mask, other=0.0)


@triton.jit
def _normed_x(xr, rstd, nw, NORM: tl.constexpr, OUT_BF16: tl.constexpr, x_dtype: tl.constexpr):
    """x's tile as loaded, in float32, after the RMSNorm where NORM (values of x's dtype either way)."""
    return _normed_by(xr.to(tl.float32), rstd, nw, NORM, OUT_BF16, x_dtype)


@triton.jit
def _w_tile(w_ptr, offs_n, offs_k, N, K, EVEN_K: tl.constexpr):
    """W[offs_n, offs_k] as stored (float8 e4m3); the mask is constant along K where EVEN_K (wide loads)."""
    if EVEN_K:
        mask = (offs_n < N)[:, None]
    else:
        mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
    return tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=mask, other=0.0)


@triton.jit
def _e4m3_bf16_bits(w):
    """e4m3 codes as the int16 bits of bf16 values 2^-120 times theirs, by integer ops, which issue at four
    times the rate of conversions (conversions through fp16 held the tensor-core path's weight reads to ~2 TB/s,
    H100): the code sign-extended and shifted left by 4 holds the sign at bit 15 and exponent and mantissa at
    bits 10-4 (the biases differ by 120; e4m3 subnormals land on bf16 subnormals). NaN codes, which
    quantization never writes, read as 480."""
    code = w.to(tl.int8, bitcast=True).to(tl.int16)
    return (code << 4) & -30736  # 0x87F0


@triton.jit
def _e4m3_as_bf16_ops(w):
    """The values of `.to(tl.bfloat16)`: _e4m3_bf16_bits times 2^120, exactly."""
    return _e4m3_bf16_bits(w).to(tl.bfloat16, bitcast=True) * 1.329227995784916e36  # 2^120


@triton.jit
def _e4m3_as_bf16_asm(w):
    """_e4m3_as_bf16_ops on two codes a register: a byte permute sign-extends two codes into 16-bit halves,
    then one shift, one mask and one bf16x2 multiply by 2^120 (0x7B80) serve both (the compiler's per-element
    16-bit ops and moves cost twice the instructions). The multiply is an fma adding -0.0, exact and signed
    zeros kept: mul.bf16x2 needs sm_90, fma.bf16x2 sm_80 (Ada's FP8 GPUs are sm_89)."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b32 lo, hi, k, z;
        prmt.b32 lo, $2, 0, 0x9180;
        prmt.b32 hi, $2, 0, 0xB3A2;
        shl.b32 lo, lo, 4;
        shl.b32 hi, hi, 4;
        and.b32 lo, lo, 0x87F087F0;
        and.b32 hi, hi, 0x87F087F0;
        mov.b32 k, 0x7B807B80;
        mov.b32 z, 0x80008000;
        fma.rn.bf16x2 $0, lo, k, z;
        fma.rn.bf16x2 $1, hi, k, z;
        }""",
        "=r,=r,r",
        [w.to(tl.uint8, bitcast=True)],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=4,
    )


# The interpreter runs no PTX.
_BF16_BY_OPS = tl.constexpr(INTERPRETED)


@triton.jit
def _e4m3_as_bf16(w):
    """_e4m3_as_bf16_ops under the interpreter, else _e4m3_as_bf16_asm (a function, not an alias: torch.compile
    copies a kernel's helpers by the names they were defined under)."""
    if _BF16_BY_OPS:
        converted = _e4m3_as_bf16_ops(w)
    else:
        converted = _e4m3_as_bf16_asm(w)
    return converted


@triton.jit
def _e4m3_as(w, dtype: tl.constexpr):
    """e4m3 codes as `dtype` for the tensor cores: bf16 by integer ops, else converted."""
    if dtype == tl.bfloat16:
        converted = _e4m3_as_bf16(w)
    else:
        converted = w.to(dtype)
    return converted


@triton.jit
def _x_as_e4m3_pair(xv):
    """A bf16 tile of x as (hi + lo / 16) * scale: hi and lo e4m3 [BLOCK_M, BLOCK_K], scale a power of two a row
    [BLOCK_M], so that e4m3 tensor cores multiply the weights' codes as loaded. Exact where |x| is within 2^-13
    of its row's largest: bf16 holds 8 significant bits, hi is x cut to 4 by a mask (sign, exponent, 3 mantissa
    bits: no rounding, so no rounding mode matters) and the rest, below hi's last place, holds 4 at most.
    Smaller values land on e4m3's subnormals: off by at most 2^-17 of the row's largest. NaN and Inf reach
    the products (Inf through lo, as NaN)."""
    x = xv.to(tl.float32)
    biased = (tl.max(tl.abs(x), axis=1).to(tl.int32, bitcast=True) >> 23) & 0xFF
    e = tl.maximum(biased - 7, 1)  # scale 2^(e-127): the row's largest lands in [128, 256), under e4m3's 448
    scale = (e << 23).to(tl.float32, bitcast=True)
    xs = x * ((254 - e) << 23).to(tl.float32, bitcast=True)[:, None]
    cut = (xs.to(tl.int32, bitcast=True) & -1048576).to(tl.float32, bitcast=True)  # 0xFFF00000
    return cut.to(tl.float8e4nv), ((xs - cut) * 16.0).to(tl.float8e4nv), scale


@triton.jit
def _x_terms_tile(xt_ptr, xs_ptr, offs_m, offs_k, k0, M, K, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """_x_as_e4m3_pair's (hi, lo, scale) of a K tile as fp8_x_terms_kernel wrote them: a row's hi codes, then
    its lo codes ([M, 2, K]), and a scale a row and K tile ([M, cdiv(K, BLOCK_K)])."""
    if EVEN_K:
        mask = (offs_m < M)[:, None]
    else:
        mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
    at = offs_m[:, None] * (2 * K) + offs_k[None, :]
    hi = tl.load(xt_ptr + at, mask=mask, other=0.0)
    lo = tl.load(xt_ptr + at + K, mask=mask, other=0.0)
    scale = tl.load(xs_ptr + offs_m * tl.cdiv(K, BLOCK_K) + k0 // BLOCK_K, mask=offs_m < M, other=1.0)
    return hi, lo, scale


@triton.jit
def _tile_scale(s_ptr, row_block, k0, SCALE_BLOCK, S_COLS):
    """The block scale of the K tile starting at k0 in the program's block of rows (the tile lies in one block
    of columns: the launch keeps SCALE_BLOCK % BLOCK_K == 0 with tensor cores)."""
    return tl.load(s_ptr + row_block * S_COLS + k0 // SCALE_BLOCK)


@triton.jit
def _column_scales(s_ptr, row_block, offs_k, K, SCALE_BLOCK, S_COLS):
    """The block scales of columns offs_k in the program's block of rows, float32 [BLOCK_K]."""
    return tl.load(s_ptr + row_block * S_COLS + offs_k // SCALE_BLOCK, mask=offs_k < K, other=0.0)


@triton.jit
def _accumulate_fma(
    x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, BLOCKWISE: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """Float32 multiply-and-sum, the products summed element-wise over the whole K walk and reduced across
    lanes once at the end (skinny_kernels._accumulate_one_row's way): [BLOCK_M, BLOCK_N]."""
    wide = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        xr = _x_tile(x_ptr, offs_m, offs_k, M, K, EVEN_K)
        xv = _normed_x(xr, rstd, _norm_weights(nw_ptr, offs_k, K, NORM), NORM, OUT_BF16, x_ptr.dtype.element_ty)
        if BLOCKWISE:
            xv = xv * _column_scales(s_ptr, row_block, offs_k, K, SCALE_BLOCK, S_COLS)[None, :]
        w = _w_tile(w_ptr, offs_n, offs_k, N, K, EVEN_K).to(tl.float32)
        wide += xv[:, None, :] * w[None, :, :]
    return tl.sum(wide, axis=2)


@triton.jit
def _row_loads(
    x_ptr, nw_ptr, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k0, SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, BLOCKWISE: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """One K tile's loads and nothing that waits for them: x's row, the norm's weights (the offsets, unread,
    without a norm), its columns' block scales (the offsets, unread, without block scales) and W's rows."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    xr = _x_tile(x_ptr, offs_m, offs_k, M, K, EVEN_K)
    if BLOCKWISE:
        scales = _column_scales(s_ptr, row_block, offs_k, K, SCALE_BLOCK, S_COLS)
    else:
        scales = offs_k
    nw = _norm_weights(nw_ptr, offs_k, K, NORM)
    return xr, nw, scales, _w_tile(w_ptr, offs_n, offs_k, N, K, EVEN_K)


@triton.jit
def _multiply_row(
    wide, xr, nw, rstd, scales, w, NORM: tl.constexpr, BLOCKWISE: tl.constexpr, OUT_BF16: tl.constexpr,
    x_dtype: tl.constexpr,
):  # fmt: skip
    """wide += x's row (normed where NORM, times its block scales) times W's tile, element-wise in float32."""
    xv = _normed_x(xr, rstd, nw, NORM, OUT_BF16, x_dtype)  # [1, BLOCK_K]
    if BLOCKWISE:
        xv = xv * scales[None, :]
    return wide + xv * w.to(tl.float32)


@triton.jit
def _e4m3_words_as_f32_asm(words):
    """Four e4m3 codes a 32-bit word (the first in the low byte) as float32: two e4m3x2 -> f16x2 conversions,
    four f16 -> f32."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b16 lo, hi, a, b, c, d;
        .reg .b32 p, q;
        mov.b32 {lo, hi}, $4;
        cvt.rn.f16x2.e4m3x2 p, lo;
        cvt.rn.f16x2.e4m3x2 q, hi;
        mov.b32 {a, b}, p;
        mov.b32 {c, d}, q;
        cvt.f32.f16 $0, a;
        cvt.f32.f16 $1, b;
        cvt.f32.f16 $2, c;
        cvt.f32.f16 $3, d;
        }""",
        "=r,=r,=r,=r,r",
        [words],
        dtype=(tl.float32, tl.float32, tl.float32, tl.float32),
        is_pure=True,
        pack=1,
    )


@triton.jit
def _e4m3_words_as_f32(words):
    """_e4m3_words_as_f32_asm, by shifts and conversions under the interpreter (which runs no PTX)."""
    if _BF16_BY_OPS:
        w0 = (words & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        w1 = ((words >> 8) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        w2 = ((words >> 16) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        w3 = ((words >> 24) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        w0, w1, w2, w3 = _e4m3_words_as_f32_asm(words)
    return w0, w1, w2, w3


@triton.jit
def _accumulate_one_row(
    x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, BLOCKWISE: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    """_accumulate_fma for one row (a GEMV) with a 2-D [BLOCK_N, BLOCK_K] tile: [1, BLOCK_N]. Triton does not
    pipeline this loop (_accumulate_one_row_staged's asks); LOOKAHEAD issues tile k + 1's loads before tile k is
    multiplied (registers for two tiles), the same sums in the same order."""
    x_dtype = x_ptr.dtype.element_ty
    wide = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    if LOOKAHEAD:
        xr, nw, scales, w = _row_loads(
            x_ptr, nw_ptr, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, SCALE_BLOCK, S_COLS,
            NORM, BLOCKWISE, EVEN_K, BLOCK_K,
        )  # fmt: skip
        for k0 in range(k_lo + BLOCK_K, k_hi, BLOCK_K):
            xr_next, nw_next, scales_next, w_next = _row_loads(
                x_ptr, nw_ptr, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k0, SCALE_BLOCK, S_COLS,
                NORM, BLOCKWISE, EVEN_K, BLOCK_K,
            )  # fmt: skip
            wide = _multiply_row(wide, xr, nw, rstd, scales, w, NORM, BLOCKWISE, OUT_BF16, x_dtype)
            xr, nw, scales, w = xr_next, nw_next, scales_next, w_next
        wide = _multiply_row(wide, xr, nw, rstd, scales, w, NORM, BLOCKWISE, OUT_BF16, x_dtype)
    else:
        for k0 in range(k_lo, k_hi, BLOCK_K):
            xr, nw, scales, w = _row_loads(
                x_ptr, nw_ptr, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k0, SCALE_BLOCK, S_COLS,
                NORM, BLOCKWISE, EVEN_K, BLOCK_K,
            )  # fmt: skip
            wide = _multiply_row(wide, xr, nw, rstd, scales, w, NORM, BLOCKWISE, OUT_BF16, x_dtype)
    return tl.sum(wide, axis=1)[None, :]


@triton.jit
def _accumulate_one_row_staged(
    x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, BLOCKWISE: tl.constexpr, OUT_BF16: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, ROW_STAGES: tl.constexpr,
):  # fmt: skip
    """_accumulate_one_row with its K walk pipelined ROW_STAGES deep through shared memory (SkinnyConfig.staged;
    Triton pipelines a loop without tl.dot only when the loop asks), K a multiple of BLOCK_K. The weights are
    loaded as 32-bit words, four codes each: loaded as bytes, the tile came back from shared memory in the
    layout of x's row, a byte a load (sm_90 SASS: LDS.U8 for every weight; words: LDS.128). [1, BLOCK_N]."""
    x_dtype = x_ptr.dtype.element_ty
    words_ptr = w_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    offs_word = tl.arange(0, BLOCK_K // 4)
    quarter = tl.zeros([BLOCK_N, BLOCK_K // 4], tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=ROW_STAGES):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        xv = _normed_x(_x_tile(x_ptr, offs_m, offs_k, M, K, True), rstd, _norm_weights(nw_ptr, offs_k, K, NORM),
                       NORM, OUT_BF16, x_dtype)  # fmt: skip
        if BLOCKWISE:
            xv = xv * _column_scales(s_ptr, row_block, offs_k, K, SCALE_BLOCK, S_COLS)[None, :]
        at = offs_n[:, None] * (K // 4) + (k0 // 4 + offs_word)[None, :]
        w0, w1, w2, w3 = _e4m3_words_as_f32(tl.load(words_ptr + at, mask=(offs_n < N)[:, None], other=0))
        even, odd = tl.split(tl.reshape(xv, [BLOCK_K // 4, 2, 2]))  # x[4i + 2a + b]: split b, then a
        x0, x2 = tl.split(even)
        x1, x3 = tl.split(odd)
        quarter += x0[None, :] * w0 + x1[None, :] * w1 + x2[None, :] * w2 + x3[None, :] * w3
    return tl.sum(quarter, axis=1)[None, :]


@triton.jit
def _dot(xv, w, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr):
    """x @ w^T ([BLOCK_M, BLOCK_N]) or, SWAP, w @ x^T ([BLOCK_N, BLOCK_M]: the weights on the MMA's long side),
    float32, w already converted to x's dtype (exact: every e4m3 value is a bf16 and an fp16 value)."""
    if SWAP:
        if IEEE_DOT:
            part = tl.dot(w, tl.trans(xv), input_precision="ieee")
        else:
            part = tl.dot(w, tl.trans(xv))
    elif IEEE_DOT:  # float32 inputs (CPU tests): no TF32
        part = tl.dot(xv, tl.trans(w), input_precision="ieee")
    else:
        part = tl.dot(xv, tl.trans(w))
    return part


@triton.jit
def _x_tile_normed(x_ptr, nw_ptr, rstd, offs_m, offs_k, M, K, EVEN_K: tl.constexpr, NORM: tl.constexpr,
                   OUT_BF16: tl.constexpr):  # fmt: skip
    """x's tile in x's dtype, through the RMSNorm where NORM (its values are of x's dtype: the cast is exact)."""
    xv = _x_tile(x_ptr, offs_m, offs_k, M, K, EVEN_K)
    if NORM != 0:
        nw = _norm_weights(nw_ptr, offs_k, K, NORM)
        xv = _normed_x(xv, rstd, nw, NORM, OUT_BF16, x_ptr.dtype.element_ty).to(x_ptr.dtype.element_ty)
    return xv


@triton.jit
def _converted_tile_product(
    xv, w_ptr, s_ptr, offs_n, offs_k, row_block, k0, N, K, SCALE_BLOCK, S_COLS, BLOCKWISE: tl.constexpr,
    IEEE_DOT: tl.constexpr, SWAP: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    """One K tile's float32 product by tensor cores, the weights converted to x's dtype, times the block's scale
    where BLOCKWISE (the tile lies in one block of columns)."""
    w = _e4m3_as(_w_tile(w_ptr, offs_n, offs_k, N, K, EVEN_K), xv.dtype)
    part = _dot(xv, w, IEEE_DOT, SWAP)
    if BLOCKWISE:
        part = part * _tile_scale(s_ptr, row_block, k0, SCALE_BLOCK, S_COLS)
    return part


@triton.jit
def _accumulate_dot(
    x_ptr, nw_ptr, rstd, w_ptr, s_ptr, w2_ptr, s2_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi,
    SCALE_BLOCK, S_COLS, NORM: tl.constexpr, BLOCKWISE: tl.constexpr, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr,
    EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr, PAIR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """Tensor cores (BLOCK_M >= 16), the weights converted to x's dtype: each K tile's product, times its
    block's scale where BLOCKWISE, added in float32. PAIR: a second weight (gate/up's up half, scales at s2_ptr)
    over the same x tiles. (acc, acc2), [BLOCK_M, BLOCK_N] each; acc2 zeros without PAIR."""
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc2 = acc
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        xv = _x_tile_normed(x_ptr, nw_ptr, rstd, offs_m, offs_k, M, K, EVEN_K, NORM, OUT_BF16)
        acc += _converted_tile_product(xv, w_ptr, s_ptr, offs_n, offs_k, row_block, k0, N, K, SCALE_BLOCK, S_COLS,
                                       BLOCKWISE, IEEE_DOT, SWAP, EVEN_K)  # fmt: skip
        if PAIR:
            acc2 += _converted_tile_product(xv, w2_ptr, s2_ptr, offs_n, offs_k, row_block, k0, N, K, SCALE_BLOCK,
                                            S_COLS, BLOCKWISE, IEEE_DOT, SWAP, EVEN_K)  # fmt: skip
    if SWAP:  # one return: the compiler types every return statement, even behind a constexpr
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    return acc, acc2


@triton.jit
def _e4m3_tile_sums(hi, lo, row_scale, w_ptr, offs_n, offs_k, N, K, EVEN_K: tl.constexpr, SWAP: tl.constexpr):
    """One K tile's float32 sums by e4m3 tensor cores: the weights' codes times x's two terms, scaled back."""
    w = _w_tile(w_ptr, offs_n, offs_k, N, K, EVEN_K)
    return _e4m3_dot(hi, w, SWAP) * row_scale + _e4m3_dot(lo, w, SWAP) * (row_scale * 0.0625)


# sm_90's e4m3 tensor cores add in fewer bits than float32 (triton's default lets them add a whole dot so): a
# float32 sum takes theirs every E4M3_RUN of K. A tile of 128 added so came out 2.8 units of bf16 from the
# reference in gate/up at 32 rows.
E4M3_RUN = tl.constexpr(32)


@triton.jit
def _e4m3_dot(xv, w, SWAP: tl.constexpr):
    """_dot of e4m3 operands, their sums taken into float32 every E4M3_RUN of K."""
    if SWAP:
        part = tl.dot(w, tl.trans(xv), max_num_imprecise_acc=E4M3_RUN)
    else:
        part = tl.dot(xv, tl.trans(w), max_num_imprecise_acc=E4M3_RUN)
    return part


@triton.jit
def _accumulate_e4m3(
    x_ptr, nw_ptr, rstd, xt_ptr, xs_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr, offs_m, offs_n, row_block, M, N, K, k_lo,
    k_hi, SCALE_BLOCK, S_COLS, NORM: tl.constexpr, BLOCKWISE: tl.constexpr, SWAP: tl.constexpr,
    EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr, PAIR: tl.constexpr, X_APART: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """E4M3 tensor cores (E4M3_DOT): each K tile of x split once (_x_as_e4m3_pair; X_APART: loaded as split by
    fp8_x_terms_kernel) and its sums (_e4m3_dot's, in float32 every E4M3_RUN of K) scaled, times the block's
    scale where BLOCKWISE. PAIR: a second weight
    (gate/up's up half, scales at s2_ptr) over the same x tiles. (acc, acc2), [BLOCK_M, BLOCK_N] each; acc2
    zeros without PAIR."""
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc2 = acc
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if X_APART:
            hi, lo, x_scale = _x_terms_tile(xt_ptr, xs_ptr, offs_m, offs_k, k0, M, K, EVEN_K, BLOCK_K)
        else:
            hi, lo, x_scale = _x_as_e4m3_pair(_x_tile_normed(x_ptr, nw_ptr, rstd, offs_m, offs_k, M, K, EVEN_K,
                                                             NORM, OUT_BF16))  # fmt: skip
        if SWAP:
            row_scale = x_scale[None, :]
        else:
            row_scale = x_scale[:, None]
        part = _e4m3_tile_sums(hi, lo, row_scale, w_ptr, offs_n, offs_k, N, K, EVEN_K, SWAP)
        if BLOCKWISE:  # the tile lies in one block of columns
            part = part * _tile_scale(s_ptr, row_block, k0, SCALE_BLOCK, S_COLS)
        acc += part
        if PAIR:
            part2 = _e4m3_tile_sums(hi, lo, row_scale, w2_ptr, offs_n, offs_k, N, K, EVEN_K, SWAP)
            if BLOCKWISE:
                part2 = part2 * _tile_scale(s2_ptr, row_block, k0, SCALE_BLOCK, S_COLS)
            acc2 += part2
    if SWAP:
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    return acc, acc2


@triton.jit
def _fp8_epilogue(
    acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, res_ptr, HAS_B: tl.constexpr, HAS_RES: tl.constexpr,
    GATE_UP: tl.constexpr, OUT_BF16: tl.constexpr,
):  # fmt: skip
    """The bf16 skinny kernels' epilogue, whose modes are these folds with eager's roundings: plain, the
    residual added (HAS_RES), silu(gate) * up (GATE_UP: acc the gate, acc2 the up half). The launch never asks
    for both folds at once."""
    MODE: tl.constexpr = 2 if GATE_UP else (1 if HAS_RES else 0)
    _epilogue(acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, b_ptr, res_ptr, HAS_B, False, MODE, 0, OUT_BF16)


@triton.jit
def _product(
    x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, BLOCKWISE: tl.constexpr, USE_DOT: tl.constexpr, IEEE_DOT: tl.constexpr,
    SWAP: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LOOKAHEAD: tl.constexpr, ROW_STAGES: tl.constexpr,
):  # fmt: skip
    """The program's [BLOCK_M, BLOCK_N] float32 sums over its K slice, scaled (per-channel scales here, block
    scales as the path applies them): tensor cores, one row, or rows of float32 multiply-and-sum."""
    if USE_DOT:
        acc, _ = _accumulate_dot(
            x_ptr, nw_ptr, rstd, w_ptr, s_ptr, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi,
            SCALE_BLOCK, S_COLS, NORM, BLOCKWISE, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, False, BLOCK_M, BLOCK_N, BLOCK_K,
        )  # fmt: skip
    elif BLOCK_M == 1 and ROW_STAGES > 1:
        acc = _accumulate_one_row_staged(
            x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
            NORM, BLOCKWISE, OUT_BF16, BLOCK_N, BLOCK_K, ROW_STAGES,
        )  # fmt: skip
    elif BLOCK_M == 1:
        acc = _accumulate_one_row(
            x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
            NORM, BLOCKWISE, EVEN_K, OUT_BF16, BLOCK_N, BLOCK_K, LOOKAHEAD,
        )  # fmt: skip
    else:
        acc = _accumulate_fma(
            x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
            NORM, BLOCKWISE, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K,
        )  # fmt: skip
    if not BLOCKWISE:
        acc = acc * _channel_scales(s_ptr, offs_n, N)
    return acc


@triton.jit
def _channel_scales(s_ptr, offs_n, N):
    """The per-channel scales of outputs offs_n, [1, BLOCK_N]."""
    return tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]


@triton.jit
def fp8_skinny_kernel(
    x_ptr, nw_ptr, eps, xt_ptr, xs_ptr, w_ptr, s_ptr, b_ptr, res_ptr, out_ptr, ws_ptr, M, N, K, K_PER_SPLIT,
    SCALE_BLOCK, S_COLS,
    NORM: tl.constexpr, HAS_B: tl.constexpr, HAS_RES: tl.constexpr, GATE_UP: tl.constexpr,
    BLOCKWISE: tl.constexpr, SPLIT: tl.constexpr, USE_DOT: tl.constexpr, IEEE_DOT: tl.constexpr,
    SWAP: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr, E4M3_DOT: tl.constexpr, PAIR_DOT: tl.constexpr,
    USE_PDL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, RSTD_CHUNK: tl.constexpr,
    RSTD_CHUNKS: tl.constexpr, LOOKAHEAD: tl.constexpr, ROW_STAGES: tl.constexpr, X_APART: tl.constexpr,
):  # fmt: skip
    """Grid (blocks of N, blocks of M, SPLIT). SPLIT > 1: float32 partials (per-channel scales applied) into
    the workspace [SPLIT, M, N] ([SPLIT, M, 2N] under GATE_UP: gate's, then up's), summed by
    fp8_finish_kernel at every row count (the bf16 kernels' last slice to arrive finishing its block, arrival.py,
    lost here: 4 us a layer at 32 rows and 18 at 8 in tune's 8B chain, H100). USE_PDL: ask L2 for the first
    weights, wait for the kernel before (it writes x and the residual), then let the next one launch. NORM:
    each program computes its rows' norms first (RSTD_CHUNKS loads of RSTD_CHUNK columns,
    skinny_matmul.rstd_chunks). GATE_UP: W is [2N, K], gate's rows then up's (with block scales N is a whole
    number of blocks), the up half's product walked after the gate's, or beside it (E4M3_DOT or PAIR_DOT, which
    the launch sets only with USE_DOT). X_APART (E4M3_DOT, NORM 0): x's terms at xt_ptr, their scales at xs_ptr
    (fp8_x_terms_kernel's), x_ptr unread."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(2)
    if USE_PDL:
        _prefetch_first_block(w_ptr, pid_n, pid_s, N, K, K_PER_SPLIT, BLOCK_N, BLOCK_K)
        gdc_wait()
        gdc_launch_dependents()
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rstd = _rows_rstd(x_ptr, offs_m, M, K, eps, NORM, BLOCK_M, RSTD_CHUNK, RSTD_CHUNKS)
    if BLOCKWISE:  # the program's block of rows
        row_block = pid_n * BLOCK_N // SCALE_BLOCK
    else:
        row_block = pid_n
    k_lo = pid_s * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    # GATE_UP's up half: its weights N rows on, its scales N channels or N // SCALE_BLOCK block rows on
    if BLOCKWISE:
        s_up = s_ptr + (N // SCALE_BLOCK) * S_COLS
    else:
        s_up = s_ptr + N
    if E4M3_DOT or PAIR_DOT:  # both halves in one walk of K: x loaded (and split) once a tile
        if E4M3_DOT:
            acc, acc2 = _accumulate_e4m3(
                x_ptr, nw_ptr, rstd, xt_ptr, xs_ptr, w_ptr, s_ptr, w_ptr + N * K, s_up, offs_m, offs_n, row_block,
                M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS, NORM, BLOCKWISE, SWAP, EVEN_K, OUT_BF16, GATE_UP, X_APART,
                BLOCK_M, BLOCK_N, BLOCK_K,
            )  # fmt: skip
        else:
            acc, acc2 = _accumulate_dot(
                x_ptr, nw_ptr, rstd, w_ptr, s_ptr, w_ptr + N * K, s_up, offs_m, offs_n, row_block, M, N, K, k_lo,
                k_hi, SCALE_BLOCK, S_COLS, NORM, BLOCKWISE, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, GATE_UP, BLOCK_M,
                BLOCK_N, BLOCK_K,
            )  # fmt: skip
        if not BLOCKWISE:
            acc = acc * _channel_scales(s_ptr, offs_n, N)
            if GATE_UP:
                acc2 = acc2 * _channel_scales(s_up, offs_n, N)
    else:
        acc = _product(
            x_ptr, nw_ptr, rstd, w_ptr, s_ptr, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi, SCALE_BLOCK, S_COLS,
            NORM, BLOCKWISE, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD,
            ROW_STAGES,
        )  # fmt: skip
        acc2 = acc
        if GATE_UP:  # walked after the gate's
            acc2 = _product(
                x_ptr, nw_ptr, rstd, w_ptr + N * K, s_up, offs_m, offs_n, row_block, M, N, K, k_lo, k_hi,
                SCALE_BLOCK, S_COLS, NORM, BLOCKWISE, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N,
                BLOCK_K, LOOKAHEAD, ROW_STAGES,
            )  # fmt: skip
    if SPLIT == 1:
        _fp8_epilogue(acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, res_ptr, HAS_B, HAS_RES, GATE_UP, OUT_BF16)
    else:
        NT: tl.constexpr = 2 if GATE_UP else 1
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        at = ws_ptr + (pid_s * M + offs_m[:, None]) * (NT * N) + offs_n[None, :]
        tl.store(at, acc, mask=mask)
        if GATE_UP:
            tl.store(at + N, acc2, mask=mask)


@triton.jit
def fp8_x_terms_kernel(
    x_ptr, nw_ptr, eps, xt_ptr, xs_ptr, M, K, NORM: tl.constexpr, OUT_BF16: tl.constexpr, USE_PDL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, RSTD_CHUNK: tl.constexpr, RSTD_CHUNKS: tl.constexpr,
):  # fmt: skip
    """x's rows (after the RMSNorm where NORM, as the product kernel folds it) split into the e4m3 tiles' two
    terms, once for every program of the product that follows (X_APART): hi and lo codes [M, 2, K] at xt_ptr,
    a scale a row and K tile [M, cdiv(K, BLOCK_K)] at xs_ptr, the values _x_as_e4m3_pair gives the loop.
    Grid (K tiles, blocks of M)."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    pid_k = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    rstd = _rows_rstd(x_ptr, offs_m, M, K, eps, NORM, BLOCK_M, RSTD_CHUNK, RSTD_CHUNKS)
    hi, lo, scale = _x_as_e4m3_pair(_x_tile_normed(x_ptr, nw_ptr, rstd, offs_m, offs_k, M, K, False, NORM, OUT_BF16))
    mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
    at = offs_m[:, None] * (2 * K) + offs_k[None, :]
    tl.store(xt_ptr + at, hi, mask=mask)
    tl.store(xt_ptr + at + K, lo, mask=mask)
    tl.store(xs_ptr + offs_m * tl.cdiv(K, BLOCK_K) + pid_k, scale, mask=offs_m < M)


@triton.jit
def fp8_finish_kernel(
    ws_ptr, b_ptr, res_ptr, out_ptr, M, N, HAS_B: tl.constexpr, HAS_RES: tl.constexpr, GATE_UP: tl.constexpr,
    SPLIT: tl.constexpr, OUT_BF16: tl.constexpr, USE_PDL: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Split-K's second pass: the bf16 kernels' _finish_block (partials summed in split order, then the
    epilogue's fold) over this kernel's workspace, gate's columns then up's. Grid as fp8_skinny_kernel's,
    SPLIT 1. USE_PDL: it waits for the partials, then lets the next kernel launch."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    NT: tl.constexpr = 2 if GATE_UP else 1
    MODE: tl.constexpr = 2 if GATE_UP else (1 if HAS_RES else 0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    _finish_block(
        ws_ptr, offs_m, tl.program_id(0), M, N, 0, NT * N, out_ptr, b_ptr, b_ptr, res_ptr, HAS_B, False, MODE, 0,
        SPLIT, OUT_BF16, BLOCK_M, BLOCK_N, False,
    )  # fmt: skip
