"""The configs `tune` tries for one op: the kinds that won somewhere on the H200 (one row: multiply-and-sum
tiles, with and without the next K block loaded ahead; more rows: tensor-core tiles, narrow ones first)."""

from __future__ import annotations

import dataclasses

from accelerate_graph.fused.kernels.configs import DEFAULT_SMS, SkinnyConfig


def wide_one_row_grid(k: int) -> list[SkinnyConfig]:
    """One row (a GEMV): blocks of 8-64 outputs over K blocks of 128-1,024 (4 or 8 warps), and inductor's
    kind of GEMV config, 1-4 outputs over K blocks of 1,024-4,096 (4-16 warps); the float32 tile
    [BLOCK_N, BLOCK_K] 8 to 64 values a thread; split-K 2 and 4 for long reductions."""
    shapes = [(n, bk, w, s) for n in (8, 16, 32, 64) for bk in (128, 256, 512, 1024) for w in (4, 8) for s in (2, 4)]
    shapes += [(n, bk, w, s) for n in (1, 2, 4) for bk in (1024, 2048, 4096) for w in (4, 8, 16) for s in (1, 2)]
    out = [SkinnyConfig(n, bk, w, s) for n, bk, w, s in shapes if 8 * 32 * w <= n * bk <= 64 * 32 * w]
    if k >= 8192:
        out += [SkinnyConfig(16, 512, 4, s, split_k=split) for split in (2, 4) for s in (2, 3)]
    return out


def lookahead_one_row_grid(k: int) -> list[SkinnyConfig]:
    """One row with the next K block loaded ahead (SkinnyConfig.lookahead): wide_one_row_grid's tiles that
    walk K in two blocks or more and hold at most 32 values a thread (two blocks live in registers), one
    num_stages each (Triton does not pipeline these loops: the stages change nothing)."""
    seen, out = set(), []
    for cfg in wide_one_row_grid(k):
        tile = (cfg.block_n, cfg.block_k, cfg.num_warps, cfg.split_k)
        per_split = -(-k // cfg.split_k)
        if tile in seen or cfg.block_n * cfg.block_k > 32 * 32 * cfg.num_warps or per_split < 2 * cfg.block_k:
            continue
        seen.add(tile)
        out.append(dataclasses.replace(cfg, lookahead=True))
    return out


def swapped_rows_grid() -> list[SkinnyConfig]:
    """More than one row, the weights on the MMA's long side (`swap`, cuBLAS's 128x8 and 64x8 tiles): blocks of
    32-128 outputs, K blocks of 64-256, deep pipelines, split-K 2 and 4."""
    shapes = [(64, 128, 4, 4), (64, 128, 4, 6), (64, 256, 4, 3), (128, 64, 4, 6), (128, 128, 4, 4)]
    shapes += [(128, 128, 8, 4), (128, 64, 8, 8), (32, 256, 4, 4)]
    out = [SkinnyConfig(n, bk, w, s, dot=True, swap=True) for n, bk, w, s in shapes]
    out += [
        SkinnyConfig(n, bk, 4, 4, split_k=x, dot=True, swap=True) for n, bk in ((64, 128), (128, 128)) for x in (2, 4)
    ]
    return out


def plain_rows_grid(k: int) -> list[SkinnyConfig]:
    """More than one row on tensor cores (rows padded to 16): blocks of 16-128 outputs over K blocks of 64-256,
    4 or 8 warps, 3 or 4 stages; split-K 2 and 4 for long reductions."""
    out = [
        SkinnyConfig(n, bk, w, s, dot=True)
        for n in (16, 32, 64, 128)
        for bk in (64, 128, 256)
        for w in (4, 8)
        for s in (3, 4)
        if n * bk <= 16384
    ]
    if k >= 8192:
        out += [SkinnyConfig(n, 256, 4, 3, split_k=split, dot=True) for n in (32, 64) for split in (2, 4)]
    return out


def programs(n: int, block_n: int, split: int) -> int:
    """Programs a launch of `n` outputs runs per block of rows: blocks of N times slices of K."""
    return -(-n // block_n) * split


def narrow_rows_grid(n: int, k: int, sms: int = DEFAULT_SMS) -> list[SkinnyConfig]:
    """More than one row in narrow tiles, for shapes whose wide tiles leave most multiprocessors idle (few
    outputs, a long K): blocks of 16-64 outputs, swapped or not, cut in K too (split-K up to 4, 8 from a K of
    4,096), those that give the most programs first, at least a third of the multiprocessors busy."""
    out = []
    for block_n in (16, 32, 64):
        for block_k in (64, 128, 256):
            for split in (1, 2, 4, 8) if k >= 4096 else (1, 2, 4):
                if split * block_k > k or programs(n, block_n, split) < sms // 3:
                    continue
                for swap in (True, False):
                    out.append(SkinnyConfig(block_n, block_k, 4, 4, split_k=split, dot=True, swap=swap))
    return sorted(out, key=lambda c: -programs(n, c.block_n, c.split_k))


def grid(rows: int, n: int, k: int, sms: int = DEFAULT_SMS) -> list[SkinnyConfig]:
    """What `tune` tries for an op of `n` outputs over `k` at `rows` rows, the likeliest first (the budget cuts
    the end): one row, the lookahead tiles then the others; more rows, the narrow tiles, then the swapped,
    then the plain tensor-core tiles."""
    if rows == 1:
        ordered = lookahead_one_row_grid(k) + wide_one_row_grid(k)
    else:
        ordered = narrow_rows_grid(n, k, sms) + swapped_rows_grid() + plain_rows_grid(k)
    return list(dict.fromkeys(ordered))


def describe(cfg: SkinnyConfig) -> str:
    """One short line: "n64 k128 w4 s4 x1 swap", "n16 k256 w4 s2 x1 fma ahead", "n128 k128 w4 s4 x1 swap e4m3"."""
    kind = ("swap" if cfg.swap else "dot") if cfg.dot else "fma"
    extra = (" ahead" if cfg.lookahead else "") + (" e4m3" if cfg.e4m3_dot else "") + (" pair" if cfg.pair else "")
    extra += (
        (" apart" if cfg.norm_apart else "") + (" staged" if cfg.staged else "") + (" x-apart" if cfg.x_apart else "")
    )
    return f"n{cfg.block_n} k{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} x{cfg.split_k} {kind}{extra}"


# -- the FP8-weight kernel (quant/fp8_kernels.py) ------------------------------------------------------------
# Its weights are one byte: a 16-byte load is 16 values, so its K tiles run longer than bf16's for the same
# bytes. 20-45 configs an op and bucket: a model's four ops at 1, 8, 16 and 32 rows are under 580 trials (the
# 8B's), more than a `--budget-s` of minutes reaches: each grid's likeliest first.


# (BLOCK_N, BLOCK_K, warps, stages) of the one-row float32 tiles whose K walk is pipelined through shared memory
# (SkinnyConfig.staged): a row's loads otherwise wait for the tile before them, one tile in flight a program
STAGED_ONE_ROW_TILES = (
    (64, 256, 8, 3), (64, 256, 8, 4), (32, 256, 4, 4), (16, 512, 4, 4), (64, 128, 4, 4), (8, 1024, 4, 4),
    (4, 1024, 4, 4), (2, 2048, 4, 3), (64, 128, 8, 6), (32, 128, 4, 6),
)  # fmt: skip


def fp8_few_rows_grid(k: int, rows: int = 1) -> list[SkinnyConfig]:
    """One or two rows. First (one row) float32 tiles whose K walk is pipelined through shared memory (`staged`),
    then inductor's kind of GEMV tile (1-4 outputs over K tiles of 1,024-4,096, 4 warps:
    many programs, each a long stream of few weight rows; won 7 of the 17 one-row bf16 calls on the H200, and
    the narrower FP8 calls there), then a few tensor-core tiles (rows padded to 16: their conversions take
    fewer instructions a weight than the float32 path's; they won the widest call, gate/up, at one row, H200;
    one of e4m3 codes as copied, fp8_rows_grid's first).
    Then float32 multiply-and-sum on wider [rows, BLOCK_N, BLOCK_K] tiles: with the next K tile loaded ahead
    (two tiles in registers, at most 32 values a thread, 4 warps; a K of two tiles or more), then without (up
    to 64 values a thread), then split-K 2 and 4 for long reductions. A second row halves the tile a thread can
    hold without spilling. Triton pipelines none of these loops but the staged ones: one num_stages each."""
    tiles = [(n, bk, w) for w in (4, 8) for n in (8, 16, 32, 64) for bk in (256, 512, 1024)]
    narrow = ((1, 1024), (1, 2048), (1, 4096), (2, 2048), (2, 4096), (4, 1024), (4, 2048))  # default_config's too
    narrow_tiles = [(n, bk, 4) for n, bk in narrow if bk <= max(k, 1024)]

    def plain(shapes):
        return [SkinnyConfig(n, bk, w, 2) for n, bk, w in shapes if 8 * 32 * w <= rows * n * bk <= 64 * 32 * w]

    dots = [
        SkinnyConfig(64, 256, 4, 3, dot=True),
        SkinnyConfig(64, 128, 4, 4, dot=True),
        SkinnyConfig(32, 128, 4, 4, split_k=2, dot=True),
        SkinnyConfig(64, 128, 2, 4, dot=True, swap=True),
        SkinnyConfig(128, 128, 4, 4, dot=True, swap=True, e4m3_dot=True),
    ]
    ahead = [
        SkinnyConfig(n, bk, w, 1, lookahead=True)
        for n, bk, w in tiles
        if w == 4 and 8 * 32 * w <= rows * n * bk <= 32 * 32 * w and k >= 2 * bk
    ]
    staged = [
        SkinnyConfig(n, bk, w, s, staged=True) for n, bk, w, s in STAGED_ONE_ROW_TILES if rows == 1 and k % bk == 0
    ]
    split = []
    if k >= 4096:
        split = [SkinnyConfig(16 // rows, 512, 4, 2, split_k=x) for x in (2, 4)]
        split += [SkinnyConfig(16 // rows, 256, 4, 1, split_k=x, lookahead=True) for x in (2, 4) if k // x >= 512]
    dots = [d for d in dots if d.split_k * d.block_k <= max(k, 64)]
    return staged + plain(narrow_tiles) + dots + ahead + plain(tiles) + split


def fp8_rows_grid(n: int, k: int, sms: int = DEFAULT_SMS) -> list[SkinnyConfig]:
    """More than two rows on tensor cores (rows padded to 16). First e4m3 tensor cores (e4m3_dot): swapped
    warpgroup MMAs that take the weights' codes from shared memory as copied, x split into two e4m3 terms
    (sm_90 SASS: no instruction a weight in the loop; the split's ~300 a K tile and program are the same at
    any BLOCK_N, so wide blocks). A warpgroup (4 warps) for every 64 outputs: with 2 warps the compiler
    converts both operands to fp16, and 128 outputs on one warpgroup spill registers at 32 rows under gate/up
    (ptxas: ~115 spill instructions; none on 8 warps, nor anywhere with 64 outputs on 4); split-K where 64-output
    blocks leave multiprocessors idle; 64 outputs in 3 stages also, three programs a multiprocessor. Then the
    weights converted to bf16: blocks of 32-128 outputs over K tiles of 128-256, 3 or 5 stages, one with 8
    warps; swapped only on 2 warps, whose MMAs take the converted weights as they come out and x whole (sm_90
    SASS: ~4.4 instructions a weight at 32 rows against 6.0 unswapped, whose x operand is re-paired by moves
    before every MMA; swapped on 4 warps it reads the weights two bytes at a time). Split-K 2 and 4 where the
    blocks of N alone leave multiprocessors idle, also for 128 outputs on 8 warps (sm_90: 80 registers, 184
    under gate/up, 72 KB of shared memory, no spill; the 8B's down at 8 rows in 4 slices: 100.1 -> 96.9 us a
    layer, H100; none won at 32 rows); K tiles no longer than K. fp8_grid puts those that give every
    multiprocessor a program first."""
    out = [
        SkinnyConfig(bn, bk, w, s, dot=True, swap=True, e4m3_dot=True)
        for bn, bk, w, s in ((128, 128, 8, 4), (256, 128, 8, 3), (64, 128, 4, 4), (64, 128, 4, 3))
    ]
    if programs(n, 64, 1) < sms:  # K in 2 (64 outputs) or 4 (128) slices: as many programs either way
        out += [SkinnyConfig(64, 128, 4, 4, split_k=2, dot=True, swap=True, e4m3_dot=True)]
        out += [SkinnyConfig(128, 128, 8, 4, split_k=4, dot=True, swap=True, e4m3_dot=True)]
    out += [
        SkinnyConfig(bn, bk, 4, s, dot=True)
        for bn, bk in ((32, 128), (64, 128), (128, 128), (64, 256), (32, 256))
        for s in (3, 5)
    ]
    out += [SkinnyConfig(128, 128, 8, 4, dot=True)]
    out += [SkinnyConfig(64, 128, 2, 4, dot=True, swap=True), SkinnyConfig(64, 256, 2, 3, dot=True, swap=True)]
    for bn, warps in ((32, 4), (64, 4), (128, 8)):
        if programs(n, bn, 1) < sms:
            out += [SkinnyConfig(bn, 128, warps, 4, split_k=x, dot=True) for x in (2, 4)]
    if programs(n, 64, 1) < sms:
        out += [SkinnyConfig(64, 128, 2, 4, split_k=x, dot=True, swap=True) for x in (2, 4)]
    return [c for c in out if c.split_k * c.block_k <= max(k, 64)]  # no slice of K past its end


def paired_gate_up_grid(n: int, sms: int = DEFAULT_SMS) -> list[SkinnyConfig]:
    """The merged gate/up on bf16-operand tensor cores with both halves in one walk of K (`pair`): each x tile
    loaded once for two weight tiles, where walking gate then up loads it twice (at 32 rows and 128 outputs a
    K tile of x is half its weight tile's bytes; the 8B's gate/up at 32 rows 73.9 -> 57.5 us, H100). Two weight
    tiles a stage: stages that fit shared memory."""
    out = [SkinnyConfig(bn, bk, w, 4, dot=True, pair=True) for bn, bk, w in ((128, 128, 8), (64, 128, 4))]
    out += [SkinnyConfig(64, 128, 2, 4, dot=True, swap=True, pair=True)]
    if programs(n, 128, 1) < sms:
        out += [SkinnyConfig(128, 128, 8, 4, split_k=2, dot=True, pair=True)]
    return out


def with_x_apart(ordered: list[SkinnyConfig]) -> list[SkinnyConfig]:
    """`ordered` with a twin of each e4m3 tile whose x terms a kernel of their own makes first (`x_apart`, the
    norm with them: never norm_apart) right after the first run of e4m3 tiles. Their loop loads x's codes as
    copied, where each program split every x tile: sm_90 SASS of the merged gate/up's loop a K tile of 128, the
    norm apart -> x apart, 788 -> 533 instructions at 32 rows and 64 outputs (4 warps), 641 -> 536 at 128 (8
    warps; 255 registers, a 16-byte spill), 474 -> 359 at 16 rows, 326 -> 277 at 8; q/k/v at 32 rows and 128
    outputs 432 -> 316; a barrier fewer a tile. Not yet timed on a GPU."""
    twins = list(dict.fromkeys(dataclasses.replace(c, x_apart=True, norm_apart=False) for c in ordered if c.e4m3_dot))
    end = next((i for i, c in enumerate(ordered) if not c.e4m3_dot), len(ordered))  # the grids put e4m3 first
    return ordered[:end] + twins + ordered[end:]


def fp8_grid(
    rows: int, n: int, k: int, block: int | None, sms: int = DEFAULT_SMS, gate_up: bool = False, normed: bool = False
) -> list[SkinnyConfig]:
    """What `tune --weights fp8` tries for a call of `n` outputs over `k` at `rows` rows, the likeliest first:
    multiply-and-sum and a few tensor-core tiles at 1-2 rows, tensor cores above (fp8_skinny.default_config's
    split); the merged gate/up (`gate_up`) above 2 rows also its paired walks, after the e4m3 tiles. A call with
    the norm folded in (`normed`) runs it as its own kernel (`norm_apart`) above 16 rows with every tile (at 32
    rows: q/k/v 25.9 -> 17.3 us, gate/up 57.5 -> 54.7, H100), and tries it with the e4m3 tiles at 3-16 rows.
    Above 2 rows each e4m3 tile also with x's terms made apart (with_x_apart).
    With block scales (`block`) only configs whose tiles lie inside one scale block (fp8_skinny.fitted leaves
    them as they are)."""
    from accelerate_graph.quant.fp8_skinny import fitted

    if rows <= 2:
        ordered = fp8_few_rows_grid(k, rows)
    else:
        ordered = fp8_rows_grid(n, k, sms)
        if gate_up:
            e4m3 = [cfg for cfg in ordered if cfg.e4m3_dot]
            ordered = e4m3 + paired_gate_up_grid(n, sms) + [cfg for cfg in ordered if not cfg.e4m3_dot]
        if normed and rows > 16:  # the norm apart was faster with every tile measured at 32 rows
            ordered = [dataclasses.replace(c, norm_apart=True) for c in ordered]
        elif normed:  # half as many rows of x to normalise a program: the e4m3 tiles (8-row winners) both ways
            ordered += [dataclasses.replace(c, norm_apart=True) for c in ordered if c.e4m3_dot]
        ordered = with_x_apart(ordered)
        ordered = sorted(ordered, key=lambda c: programs(n, c.block_n, c.split_k) < sms)  # every SM busy first
    return list(dict.fromkeys(cfg for cfg in ordered if fitted(cfg, block) == cfg))
