"""Sweep of the skinny-matmul launch configs on a GPU (fused/kernels): for the projection shapes of
Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B at 1, 8, 16 and 32 rows, times each op over a small grid of
configs, against cuBLAS (F.linear) doing the same matmuls, and against the device's copy bandwidth.

Timing is CUDA-graph replay, as in a decode step: one graph holds a chain of calls, each on its own copy
of the weights, with enough copies that they outgrow the L2 cache (a step's layers do not share weights),
so a call reads its weights from HBM. Microseconds per call; GB/s is the bytes a call must move (weights,
input, outputs, residual) over that time; cuBLAS's column times only the matmuls, one GEMM over the merged
weights as the step runs them (bias included, no norm, no residual add, no activation). The best config
of each shape is checked against the reference.

    python benchmarks/kernel_sweep.py --write-configs accelerate_graph/fused/kernels/skinny_configs.json

Stops trying configs past --budget-s (default 110 s; remaining shapes time only the table's config and the
heuristic's).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelerate_graph.core.backends.cuda import carveout_for, graph_asking, instantiate_asking  # noqa: E402
from accelerate_graph.fused.kernels import configs  # noqa: E402
from accelerate_graph.fused.kernels import skinny_matmul as sm  # noqa: E402
from accelerate_graph.fused.kernels.configs import SkinnyConfig  # noqa: E402

# hidden, intermediate, heads, kv heads, head_dim, q/k/v bias; the 8B first: its numbers are the target
MODELS = {
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, False),
    "llama-3.2-1b": (2048, 8192, 32, 8, 64, False),
    "qwen2.5-0.5b": (896, 4864, 14, 2, 64, True),
}
VOCAB = {"llama-3.1-8b": 128256, "llama-3.2-1b": 128256, "qwen2.5-0.5b": 151936}  # the LM head's outputs
ROWS = (1, 8, 16, 32)
ROTATE_BYTES = 160 * 2**20  # weight copies per graph: > 3x the H200's 50 MB L2
DTYPE = torch.bfloat16


def wide_one_row_grid(k: int) -> list[SkinnyConfig]:
    """One row (a GEMV), wider: blocks of 8-64 outputs over K blocks of 128-1024 (4 or 8 warps), and
    inductor's kind of GEMV config, 1-4 outputs over K blocks of 1,024-4,096 (4-16 warps); the float32
    tile [BLOCK_N, BLOCK_K] 8 to 64 values a thread; split-K 2 and 4 for long reductions."""
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


def wide_rows_grid(k: int) -> list[SkinnyConfig]:
    """More than one row, on tensor cores (rows padded to 16): blocks of 16-128 outputs over K blocks of
    64-256, 4 or 8 warps, 3 or 4 stages; split-K 2 and 4 for long reductions."""
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


def swapped_rows_grid() -> list[SkinnyConfig]:
    """More than one row, the weights on the MMA's long side (`swap`, cuBLAS's 128x8 and 64x8 tiles):
    blocks of 32-128 outputs (64 and up: Hopper's warpgroup MMA), K blocks of 64-256, deep pipelines
    (the K walk is all loads), split-K 2 and 4 where blocks of N alone leave multiprocessors idle."""
    shapes = [(64, 128, 4, 4), (64, 128, 4, 6), (64, 256, 4, 3), (128, 64, 4, 6), (128, 128, 4, 4)]
    shapes += [(128, 128, 8, 4), (128, 64, 8, 8), (32, 256, 4, 4)]
    out = [SkinnyConfig(n, bk, w, s, dot=True, swap=True) for n, bk, w, s in shapes]
    out += [
        SkinnyConfig(n, bk, 4, 4, split_k=x, dot=True, swap=True) for n, bk in ((64, 128), (128, 128)) for x in (2, 4)
    ]
    return out


def programs(n: int, block_n: int, split: int) -> int:
    """Programs a launch of `n` outputs runs per block of rows: blocks of N times slices of K."""
    return -(-n // block_n) * split


def most_programs_first(n: int, grid: list[SkinnyConfig]) -> list[SkinnyConfig]:
    return sorted(grid, key=lambda c: -programs(n, c.block_n, c.split_k))


def narrow_rows_grid(n: int, k: int, sms: int = configs.DEFAULT_SMS) -> list[SkinnyConfig]:
    """More than one row in narrow tiles: where the grids above give 14-32 programs for 132 multiprocessors
    (o: Qwen2.5-0.5B's 896 outputs, the 1B's 2,048; down's long K), blocks of 16-64 outputs, swapped or
    not, cut in K too (split-K 2 and 4, 8 from a K of 4,096; whole K blocks each), those that give the most
    programs first, at least a third of the multiprocessors busy."""
    out = []
    for block_n in (16, 32, 64):
        for block_k in (64, 128, 256):
            for split in (1, 2, 4, 8) if k >= 4096 else (1, 2, 4):
                if split * block_k > k or programs(n, block_n, split) < sms // 3:
                    continue
                for swap in (True, False):
                    out.append(SkinnyConfig(block_n, block_k, 4, 4, split_k=split, dot=True, swap=swap))
    return most_programs_first(n, out)


def fma_rows_grid(rows: int, k: int) -> list[SkinnyConfig]:
    """More than one row without tensor cores (skinny_kernels._accumulate_rows: the products summed in a
    [rows, BLOCK_N, BLOCK_K] float32 tile over the K walk, reduced once): blocks of 2-16 outputs over K blocks
    of 64-512, 4 or 8 warps, 16-64 float32 values a thread (gate/up holds two tiles); split-K 2 and 4 for
    long reductions. Stop 28's multiply-and-sum tiles, which reduced every K block as it came, lost to the
    tensor cores at 8 rows by 1.1-3x; these are the one-row kernels' way at several rows."""
    block_m = SkinnyConfig(1, 1).block_m(rows)
    out = [
        SkinnyConfig(n, bk, w, 1)
        for n in (2, 4, 8, 16)
        for bk in (64, 128, 256, 512)
        for w in (4, 8)
        if 16 <= block_m * n * bk // (32 * w) <= 64
    ]
    if k >= 4096:
        out += [dataclasses.replace(c, split_k=split) for c in out if c.block_n == 8 for split in (2, 4)]
    return out


def rows_grid_in_a_step(rows: int, k: int) -> list[SkinnyConfig]:
    """step_sweep.py's grid above one row, the likeliest first (its budget cuts the end): the weights on the
    MMA's long side, then the plain tensor-core tiles. Multiply-and-sum tiles at 8 rows lost to them in a
    Qwen2.5-0.5B step by 1.1-3x per op (H200, 2026-12-02, stop 28): not here (step_sweep.py --grid fma tries
    the kind that reduces once, fma_rows_grid)."""
    return swapped_rows_grid() + wide_rows_grid(k)


def whole_k_rows_grid(n: int, k: int, sms: int = configs.DEFAULT_SMS) -> list[SkinnyConfig]:
    """More than one row on tensor cores, each program's K (or its slice's) in one block of 512-1,024: all of a
    program's loads in flight at once, as the one-row kernels' k1024 tiles have them (Qwen2.5-0.5B's q/k/v ran
    2.85 us at one row and 5.36 at 8 on tiles that walk K in 4 blocks of 256; H200, stop 38). Blocks of 16-64
    outputs, swapped or not, 4 or 8 warps, at most 64 KB of weights a tile; split-K where a slice still fills a
    block of 512 (at most 8 slices); most programs first, at least a third of the multiprocessors busy."""
    out = []
    for block_k in (512, 1024):
        split = -(-k // block_k)  # slices of one whole block each
        if split > 8:
            continue
        for block_n in (16, 32, 64):
            if block_n * block_k > 32768 or programs(n, block_n, split) < sms // 3:
                continue
            for swap in (True, False):
                for warps in (4, 8):
                    out.append(SkinnyConfig(block_n, block_k, warps, 1, split_k=split, dot=True, swap=swap))
    return most_programs_first(n, out)


def grid_for(op: str, m: int, k: int, wide: bool = False, swap: bool = False) -> list[SkinnyConfig]:
    """A small grid: multiply-and-sum at few rows, tensor cores from 8 rows, split-K for long K; `swap`:
    swapped_rows_grid alone above one row."""
    if wide and m == 1:
        return wide_one_row_grid(k)
    if swap and m > 1:
        return swapped_rows_grid()
    out = []
    if m <= 8:
        out += [SkinnyConfig(16, 256, 4, 2), SkinnyConfig(32, 256, 4, 2), SkinnyConfig(32, 128, 4, 3)]
        if m == 1:
            out += [SkinnyConfig(64, 128, 4, 2), SkinnyConfig(16, 512, 4, 2)]
    if m > 1:
        out += [SkinnyConfig(16, 256, 4, 3, dot=True), SkinnyConfig(32, 128, 4, 4, dot=True)]
        out += [SkinnyConfig(32, 256, 4, 3, dot=True), SkinnyConfig(64, 128, 4, 4, dot=True)]
        if m >= 16:
            out += [SkinnyConfig(64, 256, 8, 3, dot=True)]
    if op == "residual" and k >= 8192:
        out += [SkinnyConfig(32, 256, 4, 3, split_k=2, dot=m > 2), SkinnyConfig(64, 256, 4, 3, split_k=4, dot=m > 2)]
    return out


def shapes(model: str, merged: bool = False):
    """(label, op, ns, k, bias) of one decoder layer's projections, and the LM head ("lm_head": a one-weight
    "proj" without a norm, fused/lm_head.py); `merged`: q/k/v as one weight, as the fused step's merged
    program calls them (its table key; the separate weights are the "kernels" program's)."""
    hidden, inter, heads, kv, hd, bias = MODELS[model]
    qkv = ((heads + 2 * kv) * hd,) if merged else (heads * hd, kv * hd, kv * hd)
    return [
        ("qkv", "proj", qkv, hidden, bias),
        ("o", "residual", (hidden,), heads * hd, False),
        ("gate_up", "gate_up", (inter, inter), hidden, False),
        ("down", "residual", (hidden,), inter, False),
        ("lm_head", "proj", (VOCAB[model],), hidden, False),
    ]


def graph_us(calls, rows: int = 0) -> float:
    """Microseconds per call of `calls` (thunks) replayed in one CUDA graph whose kernel nodes ask for the
    shared-memory split the decode step's graph of `rows` rows asks for (core/backends/cuda.py
    carveout_for: one split above batch 1; 0: the driver's choice)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    carveout = carveout_for(rows)
    graph = graph_asking(carveout)
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    instantiate_asking(graph, carveout)
    ms = triton.testing.do_bench(graph.replay, warmup=3, rep=15, return_mode="median")
    return ms * 1e3 / len(calls)


def describe(cfg: SkinnyConfig) -> str:
    return (
        f"n{cfg.block_n} k{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} x{cfg.split_k} "
        f"{('swap' if cfg.swap else 'dot') if cfg.dot else 'fma'}" + (" ahead" if cfg.lookahead else "")
    )


def parse_described(text: str) -> SkinnyConfig:
    """describe's line back to its config: "n64 k128 w4 s4 x1 swap", "n16 k256 w4 s2 x1 fma ahead"
    (benchmarks/trials/*.tsv)."""
    fields = text.split()
    ahead = fields[6:] == ["ahead"]
    if len(fields) != 6 + ahead or fields[5] not in ("fma", "dot", "swap") or (ahead and fields[5] != "fma"):
        raise ValueError(f"not a described config: {text!r}")
    n, k, w, s, x = (int(field[1:]) for field in fields[:5])
    return SkinnyConfig(n, k, w, s, split_k=x, dot=fields[5] != "fma", swap=fields[5] == "swap", lookahead=ahead)


def copy_bandwidth_gbs() -> float:
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=5, rep=50, return_mode="median")
    return 2 * src.numel() / (ms * 1e-3) / 1e9


class Shape:
    """One op's operands at one row count, with the weight copies the graph rotates through."""

    def __init__(self, op, ns, k, m, bias, norm: bool = True):
        self.op, self.m = op, m
        gen = torch.Generator(device="cuda").manual_seed(0)
        rand = lambda *s, scale=1.0: (torch.randn(*s, device="cuda", generator=gen) * scale).to(DTYPE)  # noqa: E731
        w_bytes = sum(ns) * k * 2
        copies = max(2, min(64, math.ceil(ROTATE_BYTES / w_bytes)))
        self.weights = [[rand(n, k, scale=k**-0.5) for n in ns] for _ in range(copies)]
        self.biases = [rand(n) if bias else None for n in ns]
        self.x = rand(m, k)
        self.norm = rand(k, scale=0.1) + 1 if op != "residual" and norm else None  # the LM head has none
        self.residual = rand(m, ns[0]) if op == "residual" else None
        out_n = sum(ns) if op == "proj" else ns[0]
        self.bytes = w_bytes + (m * k + m * out_n + (m * out_n if op == "residual" else 0)) * 2

    def run(self, ws, cfg):
        return sm.launch(self.op, self.x, self.norm, 1e-6, "llama", ws, self.biases, residual=self.residual, cfg=cfg)

    def reference(self, ws):
        if self.op == "proj":
            return sm.reference_norm_projections(self.x, self.norm, 1e-6, "llama", ws, self.biases)
        if self.op == "residual":
            return [sm.reference_linear_residual(self.x, ws[0], None, self.residual)]
        return [sm.reference_norm_gate_up(self.x, self.norm, 1e-6, "llama", ws[0], ws[1], "silu")]

    def kernel_us(self, cfg) -> float:
        return graph_us([lambda ws=ws: self.run(ws, cfg) for ws in self.weights], self.x.shape[0])

    def cublas_us(self) -> float:
        """cuBLAS as the fused step calls it without the skinny kernels: q/k/v as one GEMM, gate and up as
        one (layer_program merges them); timing the weights one GEMM each made cuBLAS look up to 2x slower
        (stop 23)."""
        bias = None if self.biases[0] is None else torch.cat(self.biases)
        merged = [torch.cat(ws) for ws in self.weights]
        return graph_us([lambda w=w: F.linear(self.x, w, bias) for w in merged], self.x.shape[0])

    def matches_reference(self, cfg) -> bool:
        got, want = self.run(self.weights[0], cfg), self.reference(self.weights[0])
        scale = max(w.float().abs().mean().item() for w in want)
        return all(torch.allclose(g.float(), w.float(), rtol=2 / 128, atol=scale / 64) for g, w in zip(got, want))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-configs", type=Path, help="JSON table of the best configs (configs.TABLE_PATH)")
    parser.add_argument("--budget-s", type=float, default=110.0, help="stop trying configs after this long")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated subset of the row counts")
    parser.add_argument("--shapes", default="qkv,o,gate_up,down", help="which projections (and lm_head), in order")
    parser.add_argument("--wide", action="store_true", help="a wider grid at one row (wide_one_row_grid)")
    parser.add_argument("--swap", action="store_true", help="above one row, swapped_rows_grid's configs only")
    parser.add_argument("--merged", action="store_true", help="q/k/v as one weight (the fused step's program)")
    args = parser.parse_args()
    rows = tuple(int(r) for r in args.rows.split(","))
    start = time.monotonic()
    device = torch.cuda.get_device_name()
    copy = copy_bandwidth_gbs()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(
        f"{device}: copy bandwidth {copy:,.0f} GB/s, {sms} SMs, triton {triton.__version__}, torch {torch.__version__}"
    )
    print(f"{'shape':28} {'M':>3} {'best config':34} {'us':>7} {'GB/s':>7} {'%copy':>6} {'cuBLAS us':>9} {'x':>5} ok")
    best: dict[str, SkinnyConfig] = {}
    pct_8b = []
    for model in args.models.split(","):
        by_label = {shape[0]: shape for shape in shapes(model, args.merged)}
        for label, op, ns, k, bias in (by_label[name] for name in args.shapes.split(",")):
            for m in rows:
                shape = Shape(op, ns, k, m, bias, norm=label != "lm_head")
                key_ns = ns[:1] if op == "gate_up" else ns  # gate and up: one N in the table's key
                heuristic = configs.heuristic(op, m, key_ns, k, sms)
                # past the budget: the config the table has (else the heuristic's), so nothing gets worse
                tries = [heuristic, configs.config_for(op, m, key_ns, k, sms)]
                if time.monotonic() - start < args.budget_s:
                    tries += grid_for(op, m, k, args.wide, args.swap)
                tries = list(dict.fromkeys(tries))
                timed = []
                for cfg in tries:
                    try:
                        timed.append((shape.kernel_us(cfg), cfg))
                    except Exception as err:  # a config the compiler refuses (shared memory): skip it
                        print(f"  skipped {cfg}: {str(err).splitlines()[0][:100]}")
                us, cfg = min(timed, key=lambda t: t[0])
                gbs = shape.bytes / (us * 1e-6) / 1e9
                cublas = shape.cublas_us()
                ok = shape.matches_reference(cfg)
                best[configs.table_key(op, configs.m_bucket(m), key_ns, k)] = cfg
                if model == "llama-3.1-8b":
                    pct_8b.append(100 * gbs / copy)
                desc = describe(cfg) + (" (heur)" if cfg == heuristic else "")
                print(
                    f"{model + ' ' + label:28} {m:>3} {desc:34} {us:7.2f} {gbs:7.0f} {100 * gbs / copy:5.1f}% "
                    f"{cublas:9.2f} {cublas / us:5.2f} {'ok' if ok else 'MISMATCH'}",
                    flush=True,
                )
                del shape
                torch.cuda.empty_cache()
    if pct_8b:
        print(
            f"8B shapes: min {min(pct_8b):.1f}% / mean {sum(pct_8b) / len(pct_8b):.1f}% of copy bandwidth "
            f"(target >= 80%): {'MET' if min(pct_8b) >= 80 else 'NOT MET'}"
        )
    if args.write_configs:
        kept = configs.read_table(args.write_configs)  # a sweep of some shapes keeps the others' entries
        configs.write_table({**kept, **best}, args.write_configs, device)
        print(f"wrote {len(best)} configs to {args.write_configs} ({len(kept)} were there)")
    print(f"total {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
