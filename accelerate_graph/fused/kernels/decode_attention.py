"""One Triton kernel (plus a small reduction when the context is split) for decode attention over
grouped-query heads: one query token per row, K/V read once per group of query heads.

query [b, Hq, 1, d] and key/value [b, Hkv, L, d] (any strides: views of a larger static cache), a mask
[b|1, 1|Hq, q, >=L] (bool, True = attend; or additive) whose last query row is used. One program takes
one (row, K/V head, split of the context): the group's query heads are the rows of a 16-row (or
larger) tile, so QK^T and PV are `tl.dot`s on tensor cores, and blocks of slots that a boolean mask
hides entirely are skipped without reading K or V (left padding, slots past the current position, a
sliding window expressed in the mask). With several splits, a second kernel combines their partial
results (flash-decoding).

Numerics against `grouped_attention.grouped_decode_attention` (the matmul path, our reference):
- scores: q.k accumulated in fp32 and kept in fp32 (the matmul path rounds q.k to the value dtype
  before `.float()`), then `* scale`, softcap, mask, as there;
- softmax online in fp32; the unnormalised probabilities exp(s - running max), in [0, 1], are cast to
  the value dtype before the PV product (the matmul path casts the normalised ones): the same rounding
  step, relative to a different scale; the sum of probabilities stays in fp32 and divides once at the end;
- a row whose every slot is masked gives zeros (the matmul path gives NaN); the padded rows of a
  batch bucket are the only such rows, and their outputs are discarded.

Configurations (BLOCK_L, num_warps, splits) are chosen when the op runs, from the batch and the context
length (`length_config`): inductor calls the op with concrete tensors, so that adds no guard. With the
attention_splits setting "fixed" (plans captured before the length rule) the splits depend on the batch
class alone (`fixed_config`: batch 1, or any larger batch).
"""

import os
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from accelerate_graph.fused.kernels import pdl
from accelerate_graph.fused.kernels.pdl import gdc_launch_dependents, gdc_wait
from accelerate_graph.settings import current

OP_NAME = "cugraph_accel::decode_attention"
MAX_GROUP = 64  # query heads per K/V head in one tile; larger groups keep the matmul path
MAX_HEAD_DIM = 256
FLOAT32_BLOCK_L = 32  # slots per loop step at most, in float32 (shared memory)
# The Triton interpreter (TRITON_INTERPRET=1, CPU tests) computes garbage in bf16 arithmetic and bf16
# tl.dot: there, loads become fp32 first (same results on a GPU up to the dot's input rounding).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

NO_MASK, BOOL_MASK, ADDITIVE_MASK = 0, 1, 2

# A context bucket of at most PRELOADED_MAX_ELEMENTS / head_dim slots (256 at a head dim of 64) with HF's
# boolean mask, at small batches (settings attention_preloaded, attention_preloaded_batch): one kernel, no split
# to combine, whose programs load the mask, K and V before their PDL wait (`_decode_preloaded_kernel`). Each
# program reads its query head's whole K tile, so larger batches, rereading K from memory, lose with it.
PRELOADED_MAX_ELEMENTS = 256 * 64  # slots x head dim of one program's K tile (registers: 8 warps)


@dataclass(frozen=True)
class DecodeConfig:
    block_l: int  # cache slots per loop step
    num_warps: int
    splits: int  # programs along the context per (row, K/V head); 1: no reduction kernel
    num_stages: int = 2

    def key(self) -> str:
        return f"L{self.block_l}/w{self.num_warps}/s{self.splits}/st{self.num_stages}"


def fixed_config(kv_heads: int, batch_one: bool) -> DecodeConfig:
    """The "fixed" splits: about 128 programs for 8 rows of batch at batch > 1, at most 16 splits."""
    rows = 1 if batch_one else 8
    splits = max(1, min(16, 128 // (kv_heads * rows)))
    return DecodeConfig(block_l=64, num_warps=4, splits=splits)


# The "length" splits: about two programs a multiprocessor (132 on an H100 or H200), never fewer than
# SPLIT_SLOTS slots a split (the 8B's shape on an H100, attention_sweep.py: 1.06x the best configuration on
# average over batches 1-32 and 128-4,096 slots, where the fixed splits took 1.27x, 2.3x at batch 4 over 4,096).
TARGET_PROGRAMS = 256
SPLIT_SLOTS = 128
MAX_SPLITS = 32


def length_config(kv_heads: int, head_dim: int, batch: int, length: int) -> DecodeConfig:
    """The configuration for `batch` rows of `kv_heads` K/V heads over `length` cache slots: a power of two of
    splits (the counts measured), 128 slots a loop step (64 above a head dimension of 128: shared memory)."""
    splits = max(1, min(MAX_SPLITS, TARGET_PROGRAMS // max(1, batch * kv_heads), length // SPLIT_SLOTS))
    return DecodeConfig(block_l=128 if head_dim <= 128 else 64, num_warps=4, splits=1 << (splits.bit_length() - 1))


@triton.jit
def _decode_split_kernel(
    Q, K, V, Mask, Out, PartAcc, PartM, PartL,
    kv_heads, length, splits, scale, softcap,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kh, stride_kl, stride_kd,
    stride_vb, stride_vh, stride_vl, stride_vd,
    stride_mb, stride_mh, stride_ml,
    stride_ob, stride_oh, stride_od,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr,
    MASK_KIND: tl.constexpr, MASK_PER_HEAD: tl.constexpr, SOFTCAP: tl.constexpr,
    DIRECT: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """One (row of the batch, K/V head, split of the context): its GROUP query heads against the
    split's slots; the normalised output (DIRECT) or the split's partial (acc, max, sum) for
    `_decode_combine_kernel`."""
    if USE_PDL:  # launched early (fused/kernels/pdl.py): the query and this step's K/V slot come from before
        gdc_wait()
        gdc_launch_dependents()
    # a launch generated by inductor passes Python floats as fp64 (Triton's own launcher: fp32): in fp32
    # either way, or the running max and sum would turn fp64 inside the loop (a type error on the H200)
    scale = tl.cast(scale, tl.float32)
    softcap = tl.cast(softcap, tl.float32)
    program = tl.program_id(0)
    split = tl.program_id(1)
    batch = program // kv_heads
    kv_head = program % kv_heads
    rows = tl.arange(0, BLOCK_G)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, BLOCK_D)
    if HEAD_DIM == BLOCK_D:  # no mask along d: loads stay vectorised
        d_ok = dims < BLOCK_D
    else:
        d_ok = dims < HEAD_DIM
    q = tl.load(
        Q + batch * stride_qb + heads[:, None] * stride_qh + dims[None, :] * stride_qd,
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    K = K + batch * stride_kb + kv_head * stride_kh
    V = V + batch * stride_vb + kv_head * stride_vh
    Mask = Mask + batch * stride_mb

    blocks_per_split = tl.cdiv(tl.cdiv(length, BLOCK_L), splits)
    lo = split * blocks_per_split * BLOCK_L
    hi = tl.minimum(lo + blocks_per_split * BLOCK_L, length)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_L):
        slots = start + tl.arange(0, BLOCK_L)
        read = slots < hi
        if MASK_KIND != 0:  # [BLOCK_G or 1, BLOCK_L]
            if MASK_PER_HEAD:
                mask_ptrs = Mask + heads[:, None] * stride_mh + slots[None, :] * stride_ml
                given = tl.load(mask_ptrs, mask=row_ok[:, None] & read[None, :], other=0)
            else:
                given = tl.load(Mask + slots * stride_ml, mask=read, other=0)[None, :]
        if MASK_KIND == 1:  # slots that no row of the group attends are not read at all
            read = read & (tl.max(given.to(tl.int32), axis=0) > 0)
        if HEAD_DIM == BLOCK_D:
            k_mask = read[None, :]
            v_mask = read[:, None]
        else:
            k_mask = d_ok[:, None] & read[None, :]
            v_mask = read[:, None] & d_ok[None, :]
        k = tl.load(K + slots[None, :] * stride_kl + dims[:, None] * stride_kd, mask=k_mask, other=0.0)
        v = tl.load(V + slots[:, None] * stride_vl + dims[None, :] * stride_vd, mask=v_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        if IEEE:
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        s = s * scale
        if SOFTCAP:  # softcap * tanh(s / softcap), tanh from exp(-2|x|) in (0, 1]: no overflow
            t = tl.exp(-2.0 * tl.abs(s / softcap))
            s = tl.where(s < 0, -softcap, softcap) * (1.0 - t) / (1.0 + t)
        live = row_ok[:, None] & read[None, :]
        if MASK_KIND == 1:
            live = live & (given != 0)
        if MASK_KIND == 2:
            s = s + given.to(tl.float32)
        s = tl.where(live, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing to attend yet: exp(-inf) = 0
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        p_cast = p.to(V.dtype.element_ty)  # the probabilities in the value dtype, as the matmul path casts them
        if UPCAST:
            v = v.to(tl.float32)
            p_cast = p_cast.to(tl.float32)
        if IEEE:
            pv = tl.dot(p_cast, v, input_precision="ieee")
        else:
            pv = tl.dot(p_cast, v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    if DIRECT:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # every slot masked: zeros
        o_ptrs = Out + batch * stride_ob + heads[:, None] * stride_oh + dims[None, :] * stride_od
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        part_rows = (batch * kv_heads * GROUP + heads) * splits + split  # partials [b, Hq, splits(, d)]
        tl.store(PartM + part_rows, m_i, mask=row_ok)
        tl.store(PartL + part_rows, l_i, mask=row_ok)
        a_ptrs = PartAcc + part_rows[:, None] * HEAD_DIM + dims[None, :]
        tl.store(a_ptrs, acc, mask=row_ok[:, None] & d_ok[None, :])


@triton.jit
def _decode_preloaded_kernel(
    Q, K, V, Mask, Out,
    heads, length, scale, softcap,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kh, stride_kl, stride_kd,
    stride_vb, stride_vh, stride_vl, stride_vd,
    stride_mb, stride_mh, stride_ml,
    stride_ob, stride_oh, stride_od,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    PARTS: tl.constexpr, SOFTCAP: tl.constexpr, UPCAST: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """One (row of the batch, query head, part of the head dimension) over the whole context bucket (at most
    BLOCK_T slots) in one tile: no loop, no split, nothing to combine. A boolean mask only. The mask, K and V
    are loaded before `gdc_wait`: every slot but the step's own was written by an earlier step (a kernel
    before the one in front), and the step's own slot, the row's last attended one (a decode step attends
    nothing after its position), is read again after the wait, with q. Its output part is written directly."""
    program = tl.program_id(0)
    part = tl.program_id(1)
    batch = program // heads
    head = program % heads
    kv_head = head // GROUP
    t = tl.arange(0, BLOCK_T)
    dims = tl.arange(0, BLOCK_D)
    d_ok = dims < HEAD_DIM
    PART_D: tl.constexpr = BLOCK_D // PARTS
    part_dims = part * PART_D + tl.arange(0, PART_D)
    part_ok = part_dims < HEAD_DIM
    K = K + batch * stride_kb + kv_head * stride_kh
    V = V + batch * stride_vb + kv_head * stride_vh
    in_bucket = t < length
    live = tl.load(Mask + batch * stride_mb + head * stride_mh + t * stride_ml, mask=in_bucket, other=0) != 0
    # the whole bucket, not only the live slots: no load waits for the mask's
    k = tl.load(K + t[:, None] * stride_kl + dims[None, :] * stride_kd, mask=in_bucket[:, None] & d_ok[None, :],
                other=0.0)  # fmt: skip
    v = tl.load(V + t[:, None] * stride_vl + part_dims[None, :] * stride_vd,
                mask=in_bucket[:, None] & part_ok[None, :], other=0.0)  # fmt: skip
    slot = tl.max(tl.where(live, t, -1), axis=0)  # the step's own slot; -1: a row that attends nothing
    if USE_PDL:  # launched early (fused/kernels/pdl.py): q and the step's slot come from the kernels in front
        gdc_wait()
        gdc_launch_dependents()
    q = tl.load(Q + batch * stride_qb + head * stride_qh + dims * stride_qd, mask=d_ok, other=0.0).to(tl.float32)
    # as tensors, not a scalar condition (the interpreter refuses a mask of a tensor and a scalar)
    k_now = tl.load(K + slot * stride_kl + dims * stride_kd, mask=d_ok & (dims * 0 + slot >= 0), other=0.0)
    v_now = tl.load(V + slot * stride_vl + part_dims * stride_vd, mask=part_ok & (part_dims * 0 + slot >= 0), other=0.0)
    is_now = t == slot
    k = tl.where(is_now[:, None], k_now[None, :], k).to(tl.float32)
    v = tl.where(is_now[:, None] | live[:, None], tl.where(is_now[:, None], v_now[None, :], v), 0.0)
    s = tl.sum(k * q[None, :], axis=1)  # q.k in fp32, as the split kernel's dot accumulates it
    s = s * tl.cast(scale, tl.float32)
    if SOFTCAP:  # softcap * tanh(s / softcap), as the split kernel computes it
        cap = tl.cast(softcap, tl.float32)
        e = tl.exp(-2.0 * tl.abs(s / cap))
        s = tl.where(s < 0, -cap, cap) * (1.0 - e) / (1.0 + e)
    s = tl.where(live, s, float("-inf"))
    m = tl.max(s, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp(s - m_safe)
    total = tl.sum(p, axis=0)
    p_cast = p.to(V.dtype.element_ty)  # the probabilities in the value dtype, as the split kernel casts them
    if UPCAST:
        v = v.to(tl.float32)
    out = tl.sum(p_cast.to(tl.float32)[:, None] * v.to(tl.float32), axis=0) / tl.where(total == 0.0, 1.0, total)
    o_ptrs = Out + batch * stride_ob + head * stride_oh + part_dims * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=part_ok)


def preloaded_parts(batch: int, head_dim: int, length: int, mask_kind: int) -> int:
    """How many head-dimension parts `_decode_preloaded_kernel` splits each query head into here; 0 where it
    does not run (attention_preloaded 0, a batch over attention_preloaded_batch, not a boolean mask, a bucket
    over PRELOADED_MAX_ELEMENTS, parts wider than the head). Settings: settings.current()."""
    chosen = current()
    parts = chosen.attention_preloaded
    if parts <= 0 or batch > chosen.attention_preloaded_batch or mask_kind != BOOL_MASK:
        return 0
    if parts & (parts - 1) or parts > _block(head_dim):
        return 0
    if triton.next_power_of_2(max(length, 1)) * _block(head_dim) > PRELOADED_MAX_ELEMENTS:
        return 0
    return parts


@triton.jit
def _decode_combine_kernel(
    Out,
    PartAcc,
    PartM,
    PartL,
    heads,
    splits,
    stride_ob,
    stride_oh,
    stride_od,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:  # launched early: the partials come from the split kernel
        gdc_wait()
        gdc_launch_dependents()
    row = tl.program_id(0)  # batch * heads + head
    parts = tl.arange(0, BLOCK_S)
    part_ok = parts < splits
    dims = tl.arange(0, BLOCK_D)
    d_ok = dims < HEAD_DIM
    m = tl.load(PartM + row * splits + parts, mask=part_ok, other=float("-inf"))
    l_s = tl.load(PartL + row * splits + parts, mask=part_ok, other=0.0)
    acc = tl.load(
        PartAcc + (row * splits + parts)[:, None] * HEAD_DIM + dims[None, :],
        mask=part_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    m_all = tl.max(m, axis=0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    weight = tl.exp(m - m_safe)  # splits with nothing to attend: 0
    total = tl.sum(weight * l_s, axis=0)
    out = tl.sum(weight[:, None] * acc, axis=0) / tl.where(total == 0.0, 1.0, total)
    o_ptrs = Out + (row // heads) * stride_ob + (row % heads) * stride_oh + dims * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=d_ok)


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def supports(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether the kernel covers these inputs (one query token; shapes and dtypes it was written for)."""
    batch, heads, q_len, head_dim = query.shape
    kv_heads = key.shape[1]
    return (
        q_len == 1
        and heads % kv_heads == 0
        and heads // kv_heads <= MAX_GROUP
        and head_dim <= MAX_HEAD_DIM
        and key.shape[-1] == head_dim
        and value.shape[-1] == head_dim
        and query.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and key.dtype == value.dtype == query.dtype
        and (mask is None or (mask.dim() == 4 and mask.shape[1] in (1, heads)))
    )


def launch(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    softcap: float,
    config: DecodeConfig,
    run: bool = True,
) -> torch.Tensor:
    """The kernels for one configuration; returns [b, 1, Hq, d] in the query's dtype. `run=False`: all
    but the kernels (the fake implementation under the interpreter, which cannot take fake tensors)."""
    batch, heads, _, head_dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads
    out = torch.empty((batch, 1, heads, head_dim), dtype=query.dtype, device=query.device)
    if mask is None:
        mask_kind, mask_rows, mask_strides = NO_MASK, query, (0, 0, 0)
    else:
        mask_kind = BOOL_MASK if mask.dtype == torch.bool else ADDITIVE_MASK
        mask_rows = mask[:, :, -1, :]  # [b|1, 1|Hq, >=L]: the one query row
        mask_strides = tuple(0 if size == 1 else stride for size, stride in zip(mask_rows.shape, mask_rows.stride()))
    if not run:
        return out
    upcast = INTERPRETED or query.dtype == torch.float32
    # float32 K/V tiles are twice as large, and the ieee dots stage more: BLOCK_L 128 at d 128 asked for
    # 270 KB of shared memory, even in one stage (the H200 has 227 KB; OutOfResources, 2026-12-01)
    stages, block_l = config.num_stages, config.block_l
    if query.dtype == torch.float32:
        stages, block_l = 1, min(block_l, FLOAT32_BLOCK_L)
    early = pdl.launch_options(query.device)
    parts = preloaded_parts(batch, head_dim, length, mask_kind)
    if parts:  # the bucket in one tile, loaded before the wait: one kernel, no combine
        _decode_preloaded_kernel[(batch * heads, parts)](
            query, key, value, mask_rows, out, heads, length, scale, softcap,
            query.stride(0), query.stride(1), query.stride(3),
            *key.stride(), *value.stride(), *mask_strides,
            out.stride(0), out.stride(2), out.stride(3),
            GROUP=group, HEAD_DIM=head_dim, BLOCK_D=_block(head_dim), BLOCK_T=triton.next_power_of_2(max(length, 1)),
            PARTS=parts, SOFTCAP=softcap > 0, UPCAST=upcast, USE_PDL=bool(early), num_warps=8, **early,
        )  # fmt: skip
        return out
    splits = config.splits
    direct = splits == 1
    part_acc = query.new_empty((batch, heads, splits, head_dim) if not direct else (1,), dtype=torch.float32)
    part_m = query.new_empty((batch, heads, splits) if not direct else (1,), dtype=torch.float32)
    part_l = torch.empty_like(part_m)
    _decode_split_kernel[(batch * kv_heads, splits)](
        query, key, value, mask_rows, out, part_acc, part_m, part_l,
        kv_heads, length, splits, scale, softcap,
        query.stride(0), query.stride(1), query.stride(3),
        *key.stride(), *value.stride(), *mask_strides,
        out.stride(0), out.stride(2), out.stride(3),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_G=_block(group), BLOCK_D=_block(head_dim), BLOCK_L=block_l,
        MASK_KIND=mask_kind, MASK_PER_HEAD=mask_strides[1] != 0, SOFTCAP=softcap > 0, DIRECT=direct, UPCAST=upcast, IEEE=upcast,
        USE_PDL=bool(early), num_warps=config.num_warps, num_stages=stages, **early,
    )  # fmt: skip
    if not direct:
        _decode_combine_kernel[(batch * heads,)](
            out, part_acc, part_m, part_l, heads, splits,
            out.stride(0), out.stride(2), out.stride(3),
            HEAD_DIM=head_dim, BLOCK_D=_block(head_dim), BLOCK_S=max(2, triton.next_power_of_2(splits)),
            USE_PDL=bool(early), num_warps=4 if head_dim >= 128 else 2, **early,
        )  # fmt: skip
    return out


def _decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    softcap: float,
    run: bool = True,
) -> torch.Tensor:
    batch, _, _, head_dim = query.shape
    if run and current().attention_splits == "length":  # concrete shapes: the op is running
        config = length_config(key.shape[1], head_dim, batch, key.shape[2])
    else:
        batch_one = isinstance(batch, int) and batch == 1  # a dynamic batch is never 1 (and adds no guard)
        config = fixed_config(key.shape[1], batch_one)
    return launch(query, key, value, mask, scale, softcap, config, run)


def _op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: Optional[torch.Tensor],  # noqa: UP045 (the schema is inferred from it: Optional on every torch)
    scale: float,
    softcap: float,
) -> torch.Tensor:
    """Decode attention for one query token over grouped K/V heads; softcap 0 means none. See the module
    docstring for shapes and numerics."""
    return _decode_attention(query, key, value, mask, scale, softcap)


# An opaque op (inductor calls it at run time; our graphs capture its launches), not a triton_op that inductor
# traces into: traced, its launch read the strides the inputs had while tracing, not the ones they have, and
# replayed wrong; and the interpreter (CPU tests) cannot be traced. flexible_layout: the kernel takes any
# strides; without the tag inductor copied every layer's whole K/V cache into a contiguous buffer each call.
decode_attention = torch.library.custom_op(OP_NAME, _op, mutates_args=(), tags=(torch.Tag.flexible_layout,))


@decode_attention.register_fake
def _(query, key, value, mask, scale, softcap):
    return _decode_attention(query, key, value, mask, scale, softcap, run=False)
