"""Each FP8 product of a model's decoder layer alone at a row count, beside what bounds it: the table's config
(fp8_skinny.launch, folded as the step folds it), the same tiles' weight loads with no math (`stream_kernel`:
the programs, rows and K slices of that config, words xor-ed), and the copy time of the weight's bytes. Each
is a CUDA graph of calls over weight copies that outgrow the L2, so the weights come from HBM as in a step.
benchmarks/profile_step.py --fp8-ops prints it; what it measured is in docs/PERF.md ("Batch 32").
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.fused.kernels.skinny_matmul import k_slices
from accelerate_graph.tune.fp8_chain import DTYPE, program_calls, random_fp8
from accelerate_graph.tune.model_shapes import LayerShapes

COPIES_BYTES = 200 << 20  # weight copies of an op called in turn: more than an H200's L2 (50 MB) holds
FOLDS = {"qkv": "norm", "gate_up": "norm", "o": "residual", "down": "residual"}  # the step's folds, by step


@triton.jit
def stream_kernel(w_ptr, out_ptr, N, K_WORDS, WORDS_PER_SPLIT, PAIRED: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, EVEN: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    """A program's tile walk with no math: rows [pid_n * BLOCK_N, +BLOCK_N) of W ([N or 2N, K_WORDS] int32
    words; PAIRED: the same rows N on, the merged gate/up's up half) over its K slice, the words xor-ed and
    stored [N, BLOCK_K] per slice, so none of the loads can be dropped. The loop is pipelined STAGES deep as
    the product's is (a plain loop of loads with no MMA is not), unmasked where the tiles divide W (`EVEN`)."""
    pid_n, pid_s = tl.program_id(0), tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.int32)
    up = tl.zeros([BLOCK_N, BLOCK_K], tl.int32)
    lo = pid_s * WORDS_PER_SPLIT
    hi = tl.minimum(lo + WORDS_PER_SPLIT, K_WORDS)
    for k0 in tl.range(lo, hi, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        at = w_ptr + rows[:, None] * K_WORDS + cols[None, :]
        if EVEN:
            acc ^= tl.load(at)
            if PAIRED:
                up ^= tl.load(at + N * K_WORDS)
        else:
            mask = (rows < N)[:, None] & (cols < hi)[None, :]
            acc ^= tl.load(at, mask=mask, other=0)
            if PAIRED:
                up ^= tl.load(at + N * K_WORDS, mask=mask, other=0)
    at = out_ptr + (pid_s * N + rows[:, None]) * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]
    tl.store(at, acc ^ up, mask=(rows < N)[:, None])


def stream(weight: torch.Tensor, cfg: SkinnyConfig, paired: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """stream_kernel over `weight` (e4m3 [N or 2N, K], K a multiple of 4) in `cfg`'s tiles: its programs' rows
    (block_n) and K slices (split_k; block_k bytes a step). Returns the xor of each row's words a slice
    ([split, N, words of a step]), the up half's xor-ed in where `paired`."""
    rows, k = weight.shape[0] // (2 if paired else 1), weight.shape[1]
    k_per_split, split = k_slices(k, cfg)  # the product's K slices, in bytes: the kernel walks words
    step = max(1, cfg.block_k // 4)
    if out is None:
        out = torch.empty((split, rows, step), dtype=torch.int32, device=weight.device)
    grid = (triton.cdiv(rows, cfg.block_n), split)
    even = rows % cfg.block_n == 0 and k % k_per_split == 0  # k_slices' slices are whole K tiles
    stream_kernel[grid](
        weight.view(torch.int32), out, rows, k // 4, k_per_split // 4, PAIRED=paired, BLOCK_N=cfg.block_n,
        BLOCK_K=step, EVEN=even, STAGES=cfg.num_stages, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


@dataclasses.dataclass(frozen=True)
class OpCall:
    """One FP8 product as the fused step calls it: its name, weight rows (both halves for the merged gate/up), K,
    the fold (`norm` before q/k/v and gate/up, `residual` after o and down) and whether it is the gate/up."""

    name: str
    n: int
    k: int
    fold: str
    gate_up: bool

    @property
    def outputs(self) -> int:
        return self.n // 2 if self.gate_up else self.n


def layer_ops(shapes: LayerShapes, block: int | None) -> list[OpCall]:
    """The products of one layer, each shape once, as the fused FP8 step calls them with fp8_fold on."""
    seen, ops = set(), []
    for step, calls in program_calls(shapes, block, folds=True).items():
        for call in calls:
            if call.key not in seen:
                seen.add(call.key)
                ops.append(OpCall(call.name, call.n, call.k, FOLDS[step], call.gate_up))
    return ops


def op_timings(op: OpCall, rows: int, block: int | None, cfg: SkinnyConfig, bytes_per_s: float, device) -> dict:
    """us of `op` at `rows` rows alone (the table's `cfg`), of its tiles' loads alone, and of its weight's bytes
    at `bytes_per_s`; GB/s of the first two."""
    from accelerate_graph.quant import fp8_skinny
    from accelerate_graph.tune.chain import graph_us

    gen = torch.Generator(device=device).manual_seed(0)
    count = max(2, triton.cdiv(COPIES_BYTES, op.n * op.k) + 1)
    weights = [random_fp8(op.n, op.k, block, gen, device) for _ in range(count)]
    x = torch.randn(rows, op.k, device=device, generator=gen).to(DTYPE)
    folded = {}
    if op.fold == "norm":
        folded = {"norm_weight": torch.rand(op.k, device=device, generator=gen).to(DTYPE) + 0.5, "eps": 1e-5}
    if op.gate_up:
        folded["gate_up"] = True
    if op.fold == "residual":
        folded["residual"] = torch.randn(rows, op.n, device=device, generator=gen).to(DTYPE)
    product = graph_us(
        lambda: [fp8_skinny.launch(x, w, s, block, None, cfg, **folded) for w, s in weights], rows, count
    )
    out = stream(weights[0][0], cfg, op.gate_up)
    loads = graph_us(lambda: [stream(w, cfg, op.gate_up, out) for w, _ in weights], rows, count)
    size = op.n * op.k
    return {
        "op": op.name, "rows": rows, "weight_bytes": size, "config": dataclasses.asdict(cfg),
        "us": product, "GBps": size / product / 1e3, "loads_alone_us": loads, "loads_alone_GBps": size / loads / 1e3,
        "copy_us": size / bytes_per_s * 1e6,
    }  # fmt: skip
