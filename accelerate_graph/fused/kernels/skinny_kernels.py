"""Triton code of the skinny matmuls; skinny_matmul launches it (read that module first).

One kernel serves the three ops (MODE): 0 projections (1-3 weights, program id picks the weight), 1 one
projection plus the residual, 2 gate and up read side by side then act(gate) * up. A program owns BLOCK_N
output columns of BLOCK_M rows and walks K (its share of K when split-K is on: then it writes float32
partial sums, and `finish_kernel` or the block's last slice to finish adds them and runs the epilogue).
`rms_norm_kernel` is the RMSNorm alone, with the projections' rstd and roundings (the step's final norm).

Arithmetic is done in float32 on values loaded `.to(tl.float32)`, and roundings to the output dtype go
through `_round`: the GPU's conversion, or under the Triton interpreter (CPU tests), which computes garbage in
bf16 and truncates fp32 -> bf16 casts, bit arithmetic that rounds to nearest even like the GPU.
"""

import os

import triton
import triton.language as tl

from accelerate_graph.fused.kernels.arrival import fence_gpu
from accelerate_graph.fused.kernels.pdl import gdc_launch_dependents, gdc_wait

# @triton.jit picks the interpreter at decoration, i.e. when this module is imported.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _round_by_cast(v, OUT_BF16: tl.constexpr, out_dtype: tl.constexpr):
    """float32 `v` rounded to the output dtype by the GPU's conversion (to nearest even, NaN kept), in float32."""
    return v.to(out_dtype).to(tl.float32)


@triton.jit
def _round_by_bits(v, OUT_BF16: tl.constexpr, out_dtype: tl.constexpr):
    """_round_by_cast, but bf16 by bit arithmetic that rounds to nearest even, NaN kept (its carry could reach
    the sign: the GPU's NaN, 0x7FFFFFFF, would come out -0.0)."""
    if OUT_BF16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        r = tl.where(v != v, v, bits.to(tl.float32, bitcast=True))
    else:
        r = _round_by_cast(v, OUT_BF16, out_dtype)
    return r


# The interpreter truncates float32 -> bf16 casts; the GPU's conversion rounds in one instruction.
_ROUND_BY_BITS = tl.constexpr(INTERPRETED)


@triton.jit
def _round(v, OUT_BF16: tl.constexpr, out_dtype: tl.constexpr):
    """_round_by_bits under the interpreter, else _round_by_cast. A function, not an alias: torch.compile
    copies a kernel's helpers by the names they were defined under."""
    if _ROUND_BY_BITS:
        r = _round_by_bits(v, OUT_BF16, out_dtype)
    else:
        r = _round_by_cast(v, OUT_BF16, out_dtype)
    return r


@triton.jit
def _prefetch_first_block(w_ptr, pid_n, pid_s, N, K, K_PER_SPLIT, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Ask L2 (`prefetch.global.L2`) for the program's first [BLOCK_N, BLOCK_K] block of W, one request per
    128-byte line (64 bf16 values): the loads after the wait then find it there. Only for data the kernel
    in front does not write (L2 is where the GPU's writes meet, so even then a later load would see the
    write). Indices are clamped, never masked (a prefetch cannot be): every address is inside W."""
    tl.static_assert(BLOCK_K >= 64, "prefetch lines of 64 bf16 values")
    LINES: tl.constexpr = BLOCK_K // 64
    rows = tl.minimum(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N - 1)
    cols = tl.minimum(pid_s * K_PER_SPLIT + tl.arange(0, LINES) * 64, K - 1)
    ptrs = w_ptr + rows[:, None].to(tl.int64) * K + cols[None, :]
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _squares(x_ptr, offs_m, offs_k, M, K):
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    xv = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
    return xv * xv


@triton.jit
def _row_rstd(x_ptr, offs_m, M, K, eps, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr):
    """rsqrt(mean(x^2) + eps) of each row, in float32 (x rows are short: every program recomputes it): the
    rows in CHUNKS loads of CHUNK columns (CHUNK * CHUNKS >= K, skinny_matmul.rstd_chunks), unrolled, every
    load issued before the first sum waits for one."""
    tl.static_assert(CHUNKS > 0, "the row norm's loads: skinny_matmul.rstd_chunks")
    squares = tl.zeros([BLOCK_M, CHUNK], tl.float32)
    for c in tl.static_range(CHUNKS):
        squares += _squares(x_ptr, offs_m, c * CHUNK + tl.arange(0, CHUNK), M, K)
    # the cast: inductor's generated launches pass Python floats as fp64, which would make the rows fp64
    return tl.rsqrt(tl.sum(squares, axis=1) / K + tl.cast(eps, tl.float32))


@triton.jit
def _rows_rstd(
    x_ptr, offs_m, M, K, eps, NORM: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr
):  # fmt: skip
    """_row_rstd where the program folds a norm in (NORM != 0), zeros (unused) where it does not."""
    if NORM != 0:
        rstd = _row_rstd(x_ptr, offs_m, M, K, eps, BLOCK_M, CHUNK, CHUNKS)
    else:
        rstd = tl.zeros([BLOCK_M], tl.float32)
    return rstd


@triton.jit
def _normed(xv, rstd, nw_ptr, offs_k, K, NORM: tl.constexpr, OUT_BF16: tl.constexpr, out_dtype: tl.constexpr):
    """x block after HF's RMSNorm (the norm's weights loaded here; see _normed_by)."""
    return _normed_by(xv, rstd, _norm_weights(nw_ptr, offs_k, K, NORM), NORM, OUT_BF16, out_dtype)


@triton.jit
def _norm_weights(nw_ptr, offs_k, K, NORM: tl.constexpr):
    """The norm's weights of one K block, as loaded (offs_k, never read, where there is no norm)."""
    if NORM != 0:
        w = tl.load(nw_ptr + offs_k, mask=offs_k < K, other=0.0)
    else:
        w = offs_k
    return w


@triton.jit
def _normed_by(xv, rstd, nw, NORM: tl.constexpr, OUT_BF16: tl.constexpr, out_dtype: tl.constexpr):
    """x block after HF's RMSNorm with the norm's weights `nw` (loaded). 1 (Llama, Qwen2): round(x * rstd)
    then round(* w) in the input dtype; 2 (Gemma): round(x * rstd * (1 + w)) in float32."""
    if NORM == 0:
        y = xv
    else:
        w = nw.to(tl.float32)
        if NORM == 1:
            y = _round(xv * rstd[:, None], OUT_BF16, out_dtype)
            y = _round(y * w[None, :], OUT_BF16, out_dtype)
        else:
            y = _round(xv * rstd[:, None] * (1.0 + w[None, :]), OUT_BF16, out_dtype)
    return y


@triton.jit
def _mac(acc, xv, w, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr):
    """acc += x @ w^T on tensor cores (BLOCK_M >= 16). SWAP: acc is [BLOCK_N, BLOCK_M] and gets w @ x^T, the
    weights on the MMA's long side (64 rows an instruction on Hopper, as cuBLAS's skinny kernels do), the
    batch on its short side."""
    if SWAP:
        if IEEE_DOT:
            acc = tl.dot(w.to(tl.float32), tl.trans(xv), acc, input_precision="ieee")
        else:
            acc = tl.dot(w, tl.trans(xv.to(w.dtype)), acc)
    elif IEEE_DOT:  # float32 inputs (CPU tests): no TF32
        acc = tl.dot(xv, tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    else:  # xv holds values of w's dtype: the cast is exact
        acc = tl.dot(xv.to(w.dtype), tl.trans(w), acc)
    return acc


@triton.jit
def _accumulate(
    x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
    NORM: tl.constexpr, TWO: tl.constexpr, USE_DOT: tl.constexpr, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr,
    EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    """x[offs_m, k_lo:k_hi] @ W[offs_n, k_lo:k_hi]^T (and the same with W2 when TWO), float32 [BLOCK_M,
    BLOCK_N]: tensor cores (USE_DOT) or float32 multiply-and-sum (_accumulate_one_row, _accumulate_rows).
    LOOKAHEAD: one row only."""
    if not USE_DOT and BLOCK_M == 1:
        return _accumulate_one_row(
            x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
            NORM, TWO, EVEN_K, OUT_BF16, BLOCK_N, BLOCK_K, LOOKAHEAD,
        )  # fmt: skip
    if not USE_DOT:
        return _accumulate_rows(
            x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
            NORM, TWO, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K,
        )  # fmt: skip
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        acc2 = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        xv, w, w2 = _tiles(
            x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, k0 + tl.arange(0, BLOCK_K), M, N, K, out_ptr,
            NORM, TWO, EVEN_K, OUT_BF16,
        )  # fmt: skip
        acc = _mac(acc, xv, w, IEEE_DOT, SWAP)
        if TWO:
            acc2 = _mac(acc2, xv, w2, IEEE_DOT, SWAP)
    if SWAP:  # one return: the compiler types every return statement, even behind a constexpr
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    return acc, acc2


@triton.jit
def _tiles(
    x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, offs_k, M, N, K, out_ptr,
    NORM: tl.constexpr, TWO: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
):  # fmt: skip
    """One K block: x's rows (normed, float32), W's rows and, when TWO, W2's (else W again, unread)."""
    xr, nw, w, w2 = _block_loads(x_ptr, nw_ptr, w_ptr, w2_ptr, offs_m, offs_n, offs_k, M, N, K, NORM, TWO, EVEN_K)
    xv = _normed_by(xr.to(tl.float32), rstd, nw, NORM, OUT_BF16, out_ptr.dtype.element_ty)
    return xv, w, w2


@triton.jit
def _block_loads(
    x_ptr, nw_ptr, w_ptr, w2_ptr, offs_m, offs_n, offs_k, M, N, K,
    NORM: tl.constexpr, TWO: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    """One K block's loads and nothing that waits for them: x's rows, the norm's weights, W's rows and, when
    TWO, W2's (else W again, unread)."""
    m_mask = offs_m < M
    n_mask = offs_n < N
    if EVEN_K:
        x_mask = m_mask[:, None]
        w_mask = n_mask[:, None]
    else:
        x_mask = m_mask[:, None] & (offs_k[None, :] < K)
        w_mask = n_mask[:, None] & (offs_k[None, :] < K)
    xr = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=x_mask, other=0.0)
    nw = _norm_weights(nw_ptr, offs_k, K, NORM)
    w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=w_mask, other=0.0)
    w2 = w
    if TWO:
        w2 = tl.load(w2_ptr + offs_n[:, None] * K + offs_k[None, :], mask=w_mask, other=0.0)
    return xr, nw, w, w2


@triton.jit
def _accumulate_one_row(
    x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
    NORM: tl.constexpr, TWO: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    """One row (a GEMV): products summed element-wise in a [BLOCK_N, BLOCK_K] float32 tile over the whole
    K walk and reduced across lanes once at the end, instead of a cross-lane reduction per K block.

    Triton does not pipeline a loop without tl.dot: each block's loads wait for the previous block's sums
    (the PTX issues them after its FMAs), so a program has one block in flight. LOOKAHEAD: the loads of
    block k + 1 are issued before block k is multiplied (registers for two blocks); the sums and their
    order are the same, bit for bit."""
    out_dtype = out_ptr.dtype.element_ty
    wide = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    wide2 = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    if LOOKAHEAD:
        xr, nw, w, w2 = _block_loads(
            x_ptr, nw_ptr, w_ptr, w2_ptr, offs_m, offs_n, k_lo + tl.arange(0, BLOCK_K), M, N, K, NORM, TWO, EVEN_K
        )  # fmt: skip
        for k0 in range(k_lo + BLOCK_K, k_hi, BLOCK_K):
            xr_next, nw_next, w_next, w2_next = _block_loads(
                x_ptr, nw_ptr, w_ptr, w2_ptr, offs_m, offs_n, k0 + tl.arange(0, BLOCK_K), M, N, K, NORM, TWO, EVEN_K
            )  # fmt: skip
            wide, wide2 = _multiply_block(wide, wide2, xr, nw, w, w2, rstd, NORM, TWO, OUT_BF16, out_dtype)
            xr, nw, w, w2 = xr_next, nw_next, w_next, w2_next
        wide, wide2 = _multiply_block(wide, wide2, xr, nw, w, w2, rstd, NORM, TWO, OUT_BF16, out_dtype)
    else:
        for k0 in range(k_lo, k_hi, BLOCK_K):
            xr, nw, w, w2 = _block_loads(
                x_ptr, nw_ptr, w_ptr, w2_ptr, offs_m, offs_n, k0 + tl.arange(0, BLOCK_K), M, N, K, NORM, TWO, EVEN_K
            )  # fmt: skip
            wide, wide2 = _multiply_block(wide, wide2, xr, nw, w, w2, rstd, NORM, TWO, OUT_BF16, out_dtype)
    return tl.sum(wide, axis=1)[None, :], tl.sum(wide2, axis=1)[None, :]


@triton.jit
def _accumulate_rows(
    x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
    NORM: tl.constexpr, TWO: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """More than one row without tensor cores: _accumulate_one_row's way for BLOCK_M rows, the products summed
    element-wise in a [BLOCK_M, BLOCK_N, BLOCK_K] float32 tile over the whole K walk and reduced across lanes
    once at the end (a cross-lane sum per K block was several times slower at 8 rows)."""
    wide = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
    wide2 = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        xv, w, w2 = _tiles(
            x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, k0 + tl.arange(0, BLOCK_K), M, N, K, out_ptr,
            NORM, TWO, EVEN_K, OUT_BF16,
        )  # fmt: skip
        wide += xv[:, None, :] * w.to(tl.float32)[None, :, :]
        if TWO:
            wide2 += xv[:, None, :] * w2.to(tl.float32)[None, :, :]
    return tl.sum(wide, axis=2), tl.sum(wide2, axis=2)


@triton.jit
def _multiply_block(
    wide, wide2, xr, nw, w, w2, rstd, NORM: tl.constexpr, TWO: tl.constexpr, OUT_BF16: tl.constexpr,
    out_dtype: tl.constexpr,
):  # fmt: skip
    """wide (and wide2 when TWO) += the normed x block times W's (W2's) block, element-wise in float32."""
    xv = _normed_by(xr.to(tl.float32), rstd, nw, NORM, OUT_BF16, out_dtype)  # [1, BLOCK_K]
    wide += xv * w.to(tl.float32)
    if TWO:
        wide2 += xv * w2.to(tl.float32)
    return wide, wide2


@triton.jit
def _epilogue(
    acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, b2_ptr, res_ptr,
    HAS_B: tl.constexpr, HAS_B2: tl.constexpr, MODE: tl.constexpr, ACT: tl.constexpr, OUT_BF16: tl.constexpr,
):  # fmt: skip
    """Bias in float32, then eager's roundings: MODE 0 round(acc); 1 round(round(acc) + residual);
    2 round(round(act(round(gate))) * round(up))."""
    out_dtype = out_ptr.dtype.element_ty
    n_mask = offs_n < N
    mask = (offs_m[:, None] < M) & n_mask[None, :]
    if HAS_B:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if MODE == 0:
        val = _round(acc, OUT_BF16, out_dtype)
    elif MODE == 1:
        res = tl.load(res_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
        val = _round(_round(acc, OUT_BF16, out_dtype) + res, OUT_BF16, out_dtype)
    else:
        if HAS_B2:
            acc2 += tl.load(b2_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        gate = _round(acc, OUT_BF16, out_dtype)
        up = _round(acc2, OUT_BF16, out_dtype)
        if ACT == 0:  # silu, as torch computes it: x / (1 + exp(-x))
            act = gate / (1.0 + tl.exp(-gate))
        else:  # gelu tanh: 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
            inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
            act = gate / (1.0 + tl.exp(-2.0 * inner))
        val = _round(_round(act, OUT_BF16, out_dtype) * up, OUT_BF16, out_dtype)
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], val.to(out_dtype), mask=mask)


@triton.jit
def _tile(
    x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, b_ptr, b2_ptr, out_ptr, res_ptr, ws_ptr, counters_ptr,
    offs_m, local_pid, pid_s, M, N, K, K_PER_SPLIT, col0, NT,
    HAS_B: tl.constexpr, HAS_B2: tl.constexpr, NORM: tl.constexpr, MODE: tl.constexpr, ACT: tl.constexpr,
    SPLIT: tl.constexpr, USE_DOT: tl.constexpr, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr, EVEN_K: tl.constexpr,
    OUT_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LOOKAHEAD: tl.constexpr, FINISH_HERE: tl.constexpr, FENCE: tl.constexpr,
):  # fmt: skip
    """One program's output block of one weight (of gate and up when MODE 2). Under split-K with
    FINISH_HERE, the block's last slice to arrive sums the partials and runs the epilogue (arrival.py)."""
    offs_n = local_pid * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_s * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    acc, acc2 = _accumulate(
        x_ptr, nw_ptr, rstd, w_ptr, w2_ptr, offs_m, offs_n, M, N, K, k_lo, k_hi, out_ptr,
        NORM, MODE == 2, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD,
    )  # fmt: skip
    if SPLIT == 1:
        _epilogue(acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, b2_ptr, res_ptr, HAS_B, HAS_B2, MODE, ACT, OUT_BF16)
    else:  # partial sums: workspace [SPLIT, M, NT], this weight's columns from col0 (up's from col0 + N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        base = ws_ptr + (pid_s * M + offs_m[:, None]) * NT + col0 + offs_n[None, :]
        tl.store(base, acc, mask=mask)
        if MODE == 2:
            tl.store(base + N, acc2, mask=mask)
        if FINISH_HERE:
            if FENCE:  # every thread's partials visible GPU-wide before its program counts itself in
                fence_gpu(offs_m)
            tl.debug_barrier()
            block = tl.program_id(0) + tl.num_programs(0) * tl.program_id(1)
            arrived = tl.atomic_add(counters_ptr + block, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:  # the last slice: every other slice's partials are written
                if FENCE:
                    fence_gpu(offs_m)
                tl.atomic_xchg(counters_ptr + block, 0, sem="relaxed", scope="gpu")  # zero for the next launch
                _finish_block(
                    ws_ptr, offs_m, local_pid, M, N, col0, NT, out_ptr, b_ptr, b2_ptr, res_ptr,
                    HAS_B, HAS_B2, MODE, ACT, SPLIT, OUT_BF16, BLOCK_M, BLOCK_N, True,
                )  # fmt: skip


@triton.jit
def skinny_kernel(
    x_ptr, nw_ptr, eps, M, K, K_PER_SPLIT,
    w0, w1, w2, b0, b1, b2, o0, o1, o2, N0, N1, N2, NB0, NB1, res_ptr, ws_ptr, counters_ptr, NT,
    NUM_W: tl.constexpr, HAS_B0: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr,
    NORM: tl.constexpr, MODE: tl.constexpr, ACT: tl.constexpr, SPLIT: tl.constexpr,
    USE_DOT: tl.constexpr, IEEE_DOT: tl.constexpr, SWAP: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
    USE_PDL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    RSTD_CHUNK: tl.constexpr, RSTD_CHUNKS: tl.constexpr, LOOKAHEAD: tl.constexpr,
    FINISH_HERE: tl.constexpr, FENCE: tl.constexpr,
):  # fmt: skip
    """Grid (blocks of N0 [+ N1 [+ N2]] for MODE 0, of N0 otherwise; blocks of M; SPLIT). FINISH_HERE
    (SPLIT > 1): the last slice of each block to finish sums the partials itself, counting arrivals in
    counters_ptr (zeros, left zero), instead of finish_kernel; FENCE: GPU-wide fences around its arrival
    (off only under the interpreter, which runs programs one by one)."""
    pid_n = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    pid_s = tl.program_id(2)
    if USE_PDL:
        # launched while the previous kernel still runs: first ask for this program's first block of
        # weights (which nothing before us writes), then wait for that kernel's outputs (x, residual),
        # then let the next kernel launch (its programs wait for all of ours in turn)
        if MODE != 0 or NUM_W == 1:  # one weight per program (gate and up side by side in MODE 2)
            _prefetch_first_block(w0, pid_n, pid_s, N0, K, K_PER_SPLIT, BLOCK_N, BLOCK_K)
            if MODE == 2:
                _prefetch_first_block(w1, pid_n, pid_s, N0, K, K_PER_SPLIT, BLOCK_N, BLOCK_K)
        gdc_wait()
        gdc_launch_dependents()
    rstd = _rows_rstd(x_ptr, offs_m, M, K, eps, NORM, BLOCK_M, RSTD_CHUNK, RSTD_CHUNKS)
    # constexprs spelled out at every call: triton 3.6 drops constexpr-ness through a tuple's *unpacking
    if MODE != 0:  # one weight (MODE 1), or gate and up side by side (MODE 2)
        _tile(
            x_ptr, nw_ptr, rstd, w0, w1, b0, b1, o0, res_ptr, ws_ptr, counters_ptr, offs_m, pid_n, pid_s, M, N0, K, K_PER_SPLIT,
            0, NT, HAS_B0, HAS_B1, NORM, MODE, ACT, SPLIT, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD, FINISH_HERE, FENCE,
        )  # fmt: skip
    elif pid_n < NB0:
        _tile(
            x_ptr, nw_ptr, rstd, w0, w0, b0, b0, o0, res_ptr, ws_ptr, counters_ptr, offs_m, pid_n, pid_s, M, N0, K, K_PER_SPLIT,
            0, NT, HAS_B0, False, NORM, MODE, ACT, SPLIT, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD, FINISH_HERE, FENCE,
        )  # fmt: skip
    else:
        if NUM_W == 2:
            _tile(
                x_ptr, nw_ptr, rstd, w1, w1, b1, b1, o1, res_ptr, ws_ptr, counters_ptr, offs_m, pid_n - NB0, pid_s, M, N1, K,
                K_PER_SPLIT, N0, NT, HAS_B1, False, NORM, MODE, ACT, SPLIT, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD, FINISH_HERE, FENCE,
            )  # fmt: skip
        elif NUM_W == 3:
            if pid_n < NB0 + NB1:
                _tile(
                    x_ptr, nw_ptr, rstd, w1, w1, b1, b1, o1, res_ptr, ws_ptr, counters_ptr, offs_m, pid_n - NB0, pid_s, M, N1, K,
                    K_PER_SPLIT, N0, NT, HAS_B1, False, NORM, MODE, ACT, SPLIT, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD, FINISH_HERE, FENCE,
                )  # fmt: skip
            else:
                _tile(
                    x_ptr, nw_ptr, rstd, w2, w2, b2, b2, o2, res_ptr, ws_ptr, counters_ptr, offs_m, pid_n - NB0 - NB1, pid_s, M,
                    N2, K, K_PER_SPLIT, N0 + N1, NT, HAS_B2, False, NORM, MODE, ACT, SPLIT, USE_DOT, IEEE_DOT, SWAP, EVEN_K, OUT_BF16, BLOCK_M, BLOCK_N, BLOCK_K, LOOKAHEAD, FINISH_HERE, FENCE,
                )  # fmt: skip


@triton.jit
def rms_norm_kernel(
    x_ptr, nw_ptr, out_ptr, eps, M, K, NORM: tl.constexpr, OUT_BF16: tl.constexpr, BLOCK_K: tl.constexpr,
    RSTD_CHUNKS: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """HF's RMSNorm of one row of x[M, K] per program (the step's final norm: one launch, not ~7 eager
    kernels), with the projections' own rstd and roundings. USE_PDL: launched while the last layer's kernel
    still runs, it waits for x, then lets the LM head's kernel launch (and ask L2 for its first weights)."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    offs_m = tl.program_id(0) + tl.arange(0, 1)
    rstd = _row_rstd(x_ptr, offs_m, M, K, eps, 1, BLOCK_K, RSTD_CHUNKS)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        at = offs_m[:, None] * K + offs_k[None, :]
        mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
        xv = tl.load(x_ptr + at, mask=mask, other=0.0).to(tl.float32)
        y = _normed(xv, rstd, nw_ptr, offs_k, K, NORM, OUT_BF16, out_ptr.dtype.element_ty)
        tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _finish_block(
    ws_ptr, offs_m, local_pid, M, N, col0, NT, out_ptr, b_ptr, b2_ptr, res_ptr,
    HAS_B: tl.constexpr, HAS_B2: tl.constexpr, MODE: tl.constexpr, ACT: tl.constexpr, SPLIT: tl.constexpr,
    OUT_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FROM_L2: tl.constexpr,
):  # fmt: skip
    """Sums a block's split-K partials and runs the epilogue. FROM_L2: the partials were written by other
    programs of this kernel (FINISH_HERE), so they are read past this multiprocessor's L1."""
    offs_n = local_pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for s in range(SPLIT):  # in split order: the sum does not depend on timing
        base = ws_ptr + (s * M + offs_m[:, None]) * NT + col0 + offs_n[None, :]
        if FROM_L2:
            acc += tl.load(base, mask=mask, other=0.0, cache_modifier=".cg")
            if MODE == 2:
                acc2 += tl.load(base + N, mask=mask, other=0.0, cache_modifier=".cg")
        else:
            acc += tl.load(base, mask=mask, other=0.0)
            if MODE == 2:
                acc2 += tl.load(base + N, mask=mask, other=0.0)
    _epilogue(acc, acc2, offs_m, offs_n, M, N, out_ptr, b_ptr, b2_ptr, res_ptr, HAS_B, HAS_B2, MODE, ACT, OUT_BF16)


@triton.jit
def finish_kernel(
    ws_ptr, M, b0, b1, b2, o0, o1, o2, N0, N1, N2, NB0, NB1, res_ptr, NT,
    NUM_W: tl.constexpr, HAS_B0: tl.constexpr, HAS_B1: tl.constexpr, HAS_B2: tl.constexpr,
    MODE: tl.constexpr, ACT: tl.constexpr, SPLIT: tl.constexpr, OUT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """Split-K's second pass: sums the partials and runs the epilogue. Grid as skinny_kernel's, SPLIT 1.
    USE_PDL: launched while skinny_kernel still runs, it waits for its partials, then lets the next kernel
    launch."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    pid_n = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    if MODE != 0:
        _finish_block(
            ws_ptr, offs_m, pid_n, M, N0, 0, NT, o0, b0, b1, res_ptr, HAS_B0, HAS_B1, MODE, ACT, SPLIT, OUT_BF16,
            BLOCK_M, BLOCK_N, False,
        )  # fmt: skip
    elif pid_n < NB0:
        _finish_block(
            ws_ptr, offs_m, pid_n, M, N0, 0, NT, o0, b0, b0, res_ptr, HAS_B0, False, MODE, ACT, SPLIT, OUT_BF16,
            BLOCK_M, BLOCK_N, False,
        )  # fmt: skip
    else:
        if NUM_W == 2:
            _finish_block(
                ws_ptr, offs_m, pid_n - NB0, M, N1, N0, NT, o1, b1, b1, res_ptr, HAS_B1, False, MODE, ACT, SPLIT,
                OUT_BF16, BLOCK_M, BLOCK_N, False,
            )  # fmt: skip
        elif NUM_W == 3:
            if pid_n < NB0 + NB1:
                _finish_block(
                    ws_ptr, offs_m, pid_n - NB0, M, N1, N0, NT, o1, b1, b1, res_ptr, HAS_B1, False, MODE, ACT, SPLIT,
                    OUT_BF16, BLOCK_M, BLOCK_N, False,
                )  # fmt: skip
            else:
                _finish_block(
                    ws_ptr, offs_m, pid_n - NB0 - NB1, M, N2, N0 + N1, NT, o2, b2, b2, res_ptr, HAS_B2, False, MODE,
                    ACT, SPLIT, OUT_BF16, BLOCK_M, BLOCK_N, False,
                )  # fmt: skip
