"""Decode attention on the GPU: the Triton kernel (fused/kernels/decode_attention.py) over a few
configurations against the path it replaces (grouped_decode_attention's matmuls, compiled by inductor
as fused mode compiles them: batch and context dynamic), per model shape, batch and context length.

Inputs are shaped as fused mode sees them: K/V are views of a static cache [B, Hkv, S, d] (bf16), the
mask is HF's bool [b, 1, 1, L] with left padding of different lengths per row and an empty last slot.
Each time is GPU time per call with a cold L2: a CUDA graph of (L2 flush, call) x N, minus a graph of
the flushes alone, best of a few replays. GB/s: the bytes a call must move (the K/V slots in use, query,
output, mask) over that time. Prints one table: per shape the time of the configuration the kernel runs
(attention_splits "length"), of the "fixed" splits, and the best swept; --json PATH: every configuration's
time beside those two, per shape.

Run on a GPU (about a minute; less with triton's and inductor's caches warm):
  PYTHONPATH=. python3 benchmarks/attention_sweep.py --json attention.json
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import time
from pathlib import Path

import torch

from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.compat import torch_internals
from accelerate_graph.fused import grouped_attention
from accelerate_graph.fused.kernels import decode_attention as kernel

MODELS = {  # name: (query heads, K/V heads, head dim)
    "qwen2.5-0.5b": (14, 2, 64),
    "llama-3.2-1b": (32, 8, 64),
    "llama-3.1-8b": (32, 8, 128),
}
TILES = ((32, 4), (64, 4), (64, 8), (128, 4), (128, 8))  # (BLOCK_L, num_warps): each a compilation per shape
CONFIGS = [
    kernel.DecodeConfig(block_l=block_l, num_warps=warps, splits=splits)
    for (block_l, warps), splits in itertools.product(TILES, (1, 2, 4, 8, 16, 32))
]
CALLS = 10  # calls per timed graph
FLUSH_BYTES = 256 << 20  # over the H200's L2 (50 MB): each call finds its K/V in HBM, as a layer does


class Attention(torch.nn.Module):
    """The `module` HF passes to attention functions; only `training` is read."""


def decode_inputs(cache_k, cache_v, heads: int, batch: int, length: int):
    """Query, K/V views of the static cache, the mask (left padding: row r holds fewer real tokens),
    and the bytes one call must move."""
    kv_heads, head_dim = cache_k.shape[1], cache_k.shape[3]
    query = torch.randn(batch, heads, 1, head_dim, device="cuda", dtype=cache_k.dtype)
    now = length - 2  # the current token's slot; the last slot of the bucket is still empty
    real = [now + 1 - (row * 37) % max(1, length // 4) for row in range(batch)]
    mask = torch.zeros(batch, 1, 1, length, dtype=torch.bool, device="cuda")
    for row, size in enumerate(real):
        mask[row, ..., now + 1 - size : now + 1] = True
    element = cache_k.element_size()
    moved = sum(real) * kv_heads * head_dim * 2 * element + 2 * query.numel() * element + mask.numel()
    return query, cache_k[:batch, :, :length], cache_v[:batch, :, :length], mask, moved


def graph_microseconds(body, *args, replays: int = 5) -> float:
    """Best GPU time per call of a CUDA graph of `body(*args)` x CALLS (no launch gaps, as in our graphs)."""
    if args:
        body = functools.partial(body, *args)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()  # warm up (compilation, allocator) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            body()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return min(times) * 1000 / CALLS


def flushed(flush: tuple[torch.Tensor, torch.Tensor], fn=None) -> None:
    """Reads FLUSH_BYTES (the L2 holds none of fn's data after it, and no dirty lines), then calls fn."""
    torch.sum(flush[0], 0, out=flush[1])
    if fn is not None:
        fn()


def cold_microseconds(fn, flush, flush_us: float) -> float:
    """GPU time of one call with a cold L2: graph(flush, fn) minus the flush's own time."""
    return max(0.0, graph_microseconds(flushed, flush, fn) - flush_us)


def compiled_grouped(batch_one: bool):
    """grouped_decode_attention under inductor with its marks as fused mode sets them."""
    compiled = torch.compile(grouped_attention.grouped_decode_attention, backend="inductor")
    module = Attention().eval()

    def run(query, key, value, mask, scale):
        if not batch_one:
            for tensor in (query, key, value, mask):
                torch_internals.maybe_mark_dynamic(tensor, 0)
        for tensor, dim in ((key, 2), (value, 2), (mask, 3)):
            torch_internals.maybe_mark_dynamic(tensor, dim)
        return compiled(module, query, key, value, mask, 0.0, scale)[0]

    return run


def measure(name: str, reference, inputs, flush, flush_us: float) -> dict:
    """One shape: the compiled matmul path, then every configuration of the kernel (and its largest
    difference from the matmul path's output)."""
    query, key, value, mask, moved = inputs
    batch, _, length, head_dim = key.shape
    scale = head_dim**-0.5
    args = (query, key, value, mask, scale)
    expected = reference(*args).float()
    row = dict(model=name, batch=batch, length=length, bytes=moved, max_error=0.0, kernel_us={})
    row["grouped_us"] = cold_microseconds(functools.partial(reference, *args), flush, flush_us)
    for config in CONFIGS:
        call = functools.partial(kernel.launch, query, key, value, mask, scale, 0.0, config)
        row["max_error"] = max(row["max_error"], (call().float() - expected).abs().max().item())
        row["kernel_us"][config] = cold_microseconds(call, flush, flush_us)
    return row


def sweep(models, batches, contexts, slots: int):
    flush = (torch.zeros(FLUSH_BYTES // 4, device="cuda"), torch.zeros((), device="cuda"))
    flush_us = graph_microseconds(flushed, flush)
    rows = []
    for name in models:
        heads, kv_heads, head_dim = MODELS[name]
        cache_k = torch.randn(max(batches), kv_heads, slots + 1, head_dim, device="cuda", dtype=torch.bfloat16)
        cache_v = torch.randn_like(cache_k)
        grouped = {True: compiled_grouped(True), False: compiled_grouped(False)}
        for batch, length in itertools.product(batches, contexts):
            inputs = decode_inputs(cache_k, cache_v, heads, batch, length)
            rows.append(measure(name, grouped[batch == 1], inputs, flush, flush_us))
    return rows


def chosen_configs(row) -> dict[str, kernel.DecodeConfig]:
    """The configurations the kernel runs for this row's shape: under "length" and under "fixed"."""
    _, kv_heads, head_dim = MODELS[row["model"]]
    return {
        "length": kernel.length_config(kv_heads, head_dim, row["batch"], row["length"]),
        "fixed": kernel.fixed_config(kv_heads, row["batch"] == 1),
    }


def print_table(rows) -> None:
    print(
        f"{'model':<14} {'b':>3} {'L':>5} | {'grouped us':>10} | {'length us':>9} {'GB/s':>6} {'x':>5} | "
        f"{'fixed us':>8} | {'best us':>8} {'best config':<22} | {'max|diff|':>9}"
    )
    for r in rows:
        chosen = chosen_configs(r)
        ours, fixed = r["kernel_us"][chosen["length"]], r["kernel_us"][chosen["fixed"]]  # both in CONFIGS
        best = min(r["kernel_us"], key=r["kernel_us"].get)
        rate = r["bytes"] / 1e3  # bytes per microsecond / 1e3 = GB/s
        print(
            f"{r['model']:<14} {r['batch']:>3} {r['length']:>5} | {r['grouped_us']:>10.1f} | {ours:>9.1f} "
            f"{rate / max(ours, 1e-3):>6.0f} {r['grouped_us'] / max(ours, 1e-3):>5.2f} | {fixed:>8.1f} | "
            f"{r['kernel_us'][best]:>8.1f} {best.key():<22} | {r['max_error']:>9.2e}"
        )
    print("length us: the configuration the kernel runs; x: grouped / length; fixed us: attention_splits fixed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--contexts", default="256,1024,4096")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="every configuration's time, per shape")
    args = parser.parse_args()
    start = time.perf_counter()
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    torch.manual_seed(0)
    with torch.no_grad():
        rows = sweep(args.models.split(","), batches, contexts, max(contexts))
    print_table(rows)
    if args.json:  # beside each shape's times, the configurations the kernel runs
        body = [
            dict(r, kernel_us={c.key(): us for c, us in r["kernel_us"].items()},
                 **{name: config.key() for name, config in chosen_configs(r).items()})
            for r in rows
        ]  # fmt: skip
        atomic_write_text(args.json, json.dumps(body, indent=1) + "\n")
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
