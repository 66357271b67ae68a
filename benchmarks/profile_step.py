"""Kernels one decode step launches, by class, for each way of running it: HF's step (what `graph`
captures) and the fused step (what `capture --fuse` captures) under the settings a way changes.

The step runs uncaptured under torch.profiler: a graph replays the same kernels, minus the launch gaps; the
captured graph's replay is timed too (ms per step, what PDL or fewer gaps change). Prints one line per (way,
batch, cache slots); writes JSON to --json. A way is a named change of settings (WAYS); `--set NAME=VALUE`
changes the settings every way starts from (`cugraph-accel settings` lists them). `--weights fp8` profiles the
FP8 step; `--per-row` the per-row graphs `serve` replays (each row at its own position).

The ways of one process are not on equal terms: on the H200 the first way replayed fastest whatever it was,
the next up to ~0.1 ms slower at Qwen2.5-0.5B's batches 8 and 32. Compare ways one process each (or in both
orders), and read the kernels' sums beside the replay times, which move less.

Run on a GPU: PYTHONPATH=. python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,32 --ways graph,fused

`--fp8-ops` times each FP8 product of the model's layer alone instead (accelerate_graph/tune/fp8_ops.py): the
table's config, the same tiles' weight loads with no math, the copy time of its bytes, at each --batches rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from accelerate_graph import settings
from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.common.option_lists import parse_whole_numbers
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.quant.fp8_format import WEIGHTS
from cli.errors import flag

CLASSES = (  # first match wins; names as cuBLAS, PyTorch and triton print them
    ("matmul", r"gemm|gemv|cutlass|nvjet|sm\d+_xmma|splitk|cublas"),
    ("attention", r"attention|fmha|flash|sdpa|softmax"),
    ("fused (triton)", r"^triton_"),
    ("copy / index", r"copy|index|cat|gather|scatter|fill"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise"),
    ("reduction", r"reduce|norm|mean|sum"),
)


@dataclass(frozen=True)
class Way:
    """One way of running the step: its label, whether the step is fused, and the settings it changes."""

    label: str
    changes: tuple[tuple[str, str], ...] = ()  # (setting, value as `--set` takes it)
    fuse: bool = True

    @property
    def attn(self) -> str:
        return "grouped" if self.fuse else "sdpa"


WAYS = {
    "graph": Way("graph: HF sdpa", fuse=False),
    "fused": Way("fused"),  # what `capture --fuse` and bench's `fused` run
    "fused-no-pdl": Way("fused, no PDL", (("pdl", "off"),)),
    "fused-no-carveout": Way("fused, driver's smem split", (("smem_carveout", "off"),)),
    "fused-matmul-attn": Way("fused, matmul attention", (("triton_attention", "off"),)),
    "fused-split-attn": Way("fused, no one-kernel attention", (("attention_preloaded", "0"),)),
    "fused-fixed-splits": Way("fused, attention splits fixed", (("attention_splits", "fixed"),)),
    "fused-skinny-b1": Way("fused, skinny kernels at 1", (("skinny_batch_1", "on"),)),
    "fused-gemv-b1": Way("fused, inductor GEMVs at 1", (("skinny_batch_1", "off"),)),
    "fused-skinny-batches": Way("fused, skinny kernels above 1", (("skinny_batches", "on"),)),
    "fused-cublas-above-1": Way("fused, cuBLAS above 1", (("skinny_batches", "off"),)),
    "fused-cublas-head": Way("fused, cuBLAS LM head", (("lm_head_kernel", "off"),)),
    "fused-hf-final-norm": Way("fused, HF's final norm", (("final_norm_kernel", "off"),)),
    "fused-hf-rotary": Way("fused, HF's rotary module", (("rotary_table", "off"),)),
    "fused-hf-mask": Way("fused, HF's mask", (("mask_kernel", "off"),)),
    "fused-gemv-inlined": Way("fused, GEMV inputs inlined", (("gemv_materialize", "off"),)),
    "fused-tuned": Way("fused, tuned", (("inductor_tuning", "on"),)),  # inductor's coordinate descent
    "fused-untuned": Way("fused, untuned", (("inductor_tuning", "off"),)),
}


def batch_sizes(text: str) -> tuple[int, ...]:
    """--batches: whole numbers from 1, comma-separated (an argparse type: a bad list is one clear error)."""
    try:
        return parse_whole_numbers(text, "batches", 1, "1,8,32")
    except BadOptionError as err:
        raise argparse.ArgumentTypeError(err.render(flag)) from None


def settings_given(parser: argparse.ArgumentParser, assignments: list[str]):
    """The environment's settings, then `--set NAME=VALUE`; a bad name or value ends the run in one line."""
    try:
        return settings.resolve(settings.parse_assignments(assignments))
    except BadOptionError as err:
        parser.error(str(err))


def way_settings(name: str, base):
    """The settings `name` runs under: `base` with the way's changes."""
    return settings.from_text(dict(WAYS[name].changes), f"The way {name}", base)


def ways_named(text: str) -> list[str]:
    """--ways: names of WAYS, comma-separated (an argparse type: an unknown name is one clear error)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in WAYS]
    if unknown or not names:
        named = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(f"no way {named}; ways: {', '.join(WAYS)}")
    return names


REPLAYS = 50


def timed_ms(call, calls: int = REPLAYS) -> tuple[float, float]:
    """Milliseconds per call of `call`: by CUDA events around `calls` calls (the host clock off CUDA: a
    smoke run), and the host's own time per call to issue them. Where the host's time is close to the
    events', the GPU waited for launches and the number is the host's, not the step's."""
    began = time.perf_counter()
    if not torch.cuda.is_available():
        for _ in range(calls):
            call()
        host = (time.perf_counter() - began) * 1000 / calls
        return host, host
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    host = (time.perf_counter() - began) * 1000 / calls
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls, host


def replay_ms(graphs, session, batch: int, prompt: int) -> tuple[float, float]:
    """Milliseconds per replay of the captured graph for `batch` at the context holding slot `prompt`, and
    the host's milliseconds to issue one (timed_ms).
    The cache is rewound once, not before each replay: a rewind is a kernel per layer (32 at 8B), which
    would be timed too; the writes walk on from `prompt` by one slot a replay."""
    tokens = torch.randint(session.vocab_size, (batch,), device=session.device)
    positions = torch.full((batch,), prompt, device=session.device)
    return rewound_ms(session, prompt, lambda: graphs.run(tokens, positions, copy=False))


def rewound_ms(session, prompt: int, replay) -> tuple[float, float]:
    """timed_ms of `replay` (one step writing the cache) after 5 warm-ups, the cache rewound to slot
    `prompt` before the warm-ups, before the timed calls and after them."""
    session.kv.rewind(prompt)
    for _ in range(5):
        replay()
    session.kv.rewind(prompt)
    timed = timed_ms(replay)
    session.kv.rewind(prompt)
    return timed


def kernel_class(name: str) -> str:
    lowered = name.lower()
    return next((label for label, pattern in CLASSES if re.search(pattern, lowered)), "other")


def profile_step(step, rewind, calls: int = 5) -> dict:
    with torch.no_grad():
        return _profile(step, rewind, calls)


def _profile(step, rewind, calls: int) -> dict:
    for _ in range(3):  # warm-ups: compilation, cuBLAS handles, autotuning
        rewind()
        step()
    if not torch.cuda.is_available():  # a smoke run: the way compiled and ran; no kernel to count
        return dict(NOTHING_COUNTED)
    rewind()
    torch.cuda.synchronize()
    # the steps back to back, the rewind outside (it is a fill per layer, not the step's): `calls` steps
    # advance the cache `calls` slots, as a replay timing does, inside the same context bucket
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    found = tally(prof, calls)
    rewind()  # keep the cache where it was
    return found


NO_TIMELINE = {"span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "idle_before": []}  # timeline of no kernel
NOTHING_COUNTED = {"kernels": 0, "kernel_us": 0.0, "by_class": {}, "by_kernel_us": {}, "by_kernel_calls": {}}
NOTHING_COUNTED |= NO_TIMELINE


def short_name(name: str) -> str:
    """A kernel's name without its signature or template arguments: what the idle lines print."""
    name = re.sub(r"^void |\(anonymous namespace\)::", "", name).split("<")[0].split("(")[0]
    return name.rsplit("::", 1)[-1][:48]


def timeline(kernels: list[tuple[float, float, str]], calls: int, top: int = 6) -> dict:
    """Where a run of `calls` steps leaves the GPU idle, from its kernels' (start us, end us, name): the
    span (first start to last end), the time some kernel runs (the union of the intervals: under PDL a
    kernel starts while the one before it ends, so the sum of durations counts overlap twice), the idle
    rest, and the `top` kernel boundaries where it goes, as "kernel ended -> kernel started" with us and
    gaps per step. A gap belongs to the kernel that ended last before it and the one that starts it."""
    if not kernels:
        return {**NO_TIMELINE, "idle_before": []}
    ordered = sorted(kernels)
    busy, idle_at = 0.0, defaultdict(lambda: [0.0, 0])
    start, end, last = ordered[0][0], ordered[0][1], ordered[0][2]
    for begin, finish, name in ordered[1:]:
        if begin > end:  # a gap: nothing runs from `end` to `begin`
            busy += end - start
            edge = idle_at[f"{short_name(last)} -> {short_name(name)}"]
            edge[0] += begin - end
            edge[1] += 1
            start = begin
        if finish >= end:
            end, last = finish, name
    busy += end - start
    span = end - ordered[0][0]
    worst = sorted(idle_at.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "span_us": round(span / calls, 1),
        "busy_us": round(busy / calls, 1),
        "idle_us": round((span - busy) / calls, 1),
        "idle_before": [[edge, round(us / calls, 2), gaps / calls] for edge, (us, gaps) in worst],
    }


def tally(prof, calls: int, classify=kernel_class) -> dict:
    """Kernels per call of a torch.profiler run over `calls` calls: count and microseconds by class
    (`classify`: a kernel's name to its class) and by kernel; copies left out."""
    counts: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    calls_of: dict[str, int] = defaultdict(int)  # launches of each kernel per step: per layer, or once
    intervals = []  # (start, end, name): where the GPU idles between kernels (timeline)
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA or "memcpy" in event.name.lower():
            continue
        intervals.append((event.time_range.start, event.time_range.end, event.name))
        label = classify(event.name)
        counts[label] += 1
        micros[label] += event.device_time
        by_name[event.name] += event.device_time
        calls_of[event.name] += 1
    return {
        "kernels": sum(counts.values()) / calls,
        "kernel_us": round(sum(micros.values()) / calls, 1),
        "by_class": {k: {"kernels": counts[k] / calls, "us": round(micros[k] / calls, 1)} for k in sorted(counts)},
        "by_kernel_us": {n: round(us / calls, 2) for n, us in sorted(by_name.items(), key=lambda kv: -kv[1])},
        "by_kernel_calls": {n: calls_of[n] / calls for n in sorted(by_name, key=lambda n: -by_name[n])},
        **timeline(intervals, calls),
    }


def run_way(name: str, args: argparse.Namespace, batches: tuple[int, ...], results: list[dict]) -> bool:
    """Capture the step the way `name` runs it, time its replays and profile its kernels at each batch;
    False when the way failed to capture (said in one line)."""
    way = WAYS[name]
    label = way.label + (f", {args.weights}" if args.weights != "model" else "") + (", per-row" if args.per_row else "")
    request = CaptureRequest(
        model=args.model,
        buckets=batches,
        attn=way.attn,
        fuse=way.fuse,
        max_cache_len=args.cache,
        prompt_len=args.prompt,
        dtype=args.dtype,
        weights=args.weights,
        per_row=args.per_row,
    )
    try:
        prepared = prepare(request)
    except Exception as err:  # noqa: BLE001 - report this way's failure, profile the others
        print(f"{args.model} {label}: failed: {' '.join(str(err).split())[:300]}", flush=True)
        return False
    session = prepared.session
    print(f"{args.model} {label}: compiled in {prepared.compile_seconds:.1f} s", flush=True)
    rewind = functools.partial(session.kv.rewind, args.prompt)
    context = prepared.graphs.contexts[0] if args.prompt < prepared.graphs.contexts[0] else None
    for batch in batches:
        replay, host = replay_ms(prepared.graphs, session, batch, args.prompt)
        print(
            f"{args.model} {label:18s} batch {batch:3d}: replay {replay:.3f} ms per step "
            f"(host {host:.3f} ms to issue one)",
            flush=True,
        )
        for slots in sorted({args.cache, context or args.cache}):
            step = session.capture_step(batch, slots)
            found = profile_step(step, rewind)
            results.append(
                {"way": label, "weights": prepared.plan.weights, "per_row": session.per_row, "batch": batch, "slots": slots,
                 "replay_ms": replay, "host_ms": host, **found}
            )  # fmt: skip
            print(
                f"{args.model} {label:18s} batch {batch:3d} slots {slots:5d}: {found['kernels']:6.0f} kernels, "
                f"{found['kernel_us']:8.1f} us of kernels, idle {found['idle_us']:5.1f} us | "
                + ", ".join(f"{k} {v['kernels']:.0f}/{v['us']:.0f}us" for k, v in found["by_class"].items()),
                flush=True,
            )
            for kernel, us in list(found["by_kernel_us"].items())[: args.top]:
                print(f"    {us:8.2f} us in {found['by_kernel_calls'][kernel]:4.0f} launches  {kernel[:100]}")
    return True


def run_fp8_ops(args: argparse.Namespace) -> int:
    """--fp8-ops: each FP8 product of the model's layer alone at each row count (tune/fp8_ops.py), one line
    each; no step is captured."""
    from accelerate_graph.bench.floor import measure_bandwidth
    from accelerate_graph.common.errors import CugraphAccelError
    from accelerate_graph.fused.kernels.configs import multiprocessors
    from accelerate_graph.quant import fp8_skinny
    from accelerate_graph.tune import fp8_ops
    from accelerate_graph.tune.grids import describe
    from accelerate_graph.tune.model_shapes import layer_shapes
    from accelerate_graph.tune.run import fp8_block_for

    if not torch.cuda.is_available():
        print("profile_step.py: --fp8-ops times kernels on a GPU, and there is none here.", file=sys.stderr)
        return 1
    weights = "fp8" if args.weights == "model" else args.weights
    try:
        shapes = layer_shapes(args.model)
        block = fp8_block_for(shapes, weights)
    except CugraphAccelError as err:
        print(f"profile_step.py: {err.render(flag)}", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    name, sms = fp8_skinny.device_name(device), multiprocessors(device)
    bytes_per_s = measure_bandwidth(device).bytes_per_s
    table = fp8_skinny.table_in_use(name).as_dict()
    print(f"{name}: copy {bytes_per_s / 1e9:,.0f} GB/s; FP8 table: {table['origin']}", flush=True)
    results = []
    for rows in args.batches:
        for op in fp8_ops.layer_ops(shapes, block):
            found = fp8_skinny.config_named(name, rows, op.outputs, op.k, block, sms, op.gate_up)
            cfg = fp8_skinny.fitted(found, block)
            timed = fp8_ops.op_timings(op, rows, block, cfg, bytes_per_s, device)
            results.append({"model": args.model, "weights": weights, **timed})
            print(
                f"{rows:3d} rows {op.name:8s} {op.n * op.k / 1e6:6.1f} MB: {describe(cfg):40s} {timed['us']:7.1f} us "
                f"({timed['GBps']:,.0f} GB/s) | its loads alone {timed['loads_alone_us']:7.1f} us | at copy "
                f"bandwidth {timed['copy_us']:6.1f} us",
                flush=True,
            )
    if args.json:
        atomic_write_text(args.json, json.dumps({"device": name, "table": table, "ops": results}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="qwen2.5-0.5b")
    parser.add_argument("--batches", type=batch_sizes, default="1,32")
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--ways", type=ways_named, default="graph,fused", help=f"in this order, of: {', '.join(WAYS)}")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting for every way")
    parser.add_argument("--weights", choices=WEIGHTS, default="model", help="fp8 or fp8-block: the FP8 step")
    parser.add_argument("--dtype", default="auto", help="the model's dtype (FP8 weights need bf16 or fp16)")
    parser.add_argument("--per-row", action="store_true", help="the per-row graphs serve replays")
    parser.add_argument("--json")
    parser.add_argument("--top", type=int, default=0, help="also print the N kernels that take longest")
    parser.add_argument("--log-tuning", help="write coordinate descent's choices (each kernel's config) to this file")
    parser.add_argument(
        "--fp8-ops",
        action="store_true",
        help="each FP8 product of MODEL's layer alone at each of --batches rows: the table's config, its tiles' "
        "loads with no math, the copy time of its bytes (no step is captured)",
    )
    args = parser.parse_args()
    if args.fp8_ops:
        return run_fp8_ops(args)
    if args.log_tuning:  # the tuned configs differ from process to process: keep them to compare
        tuner = logging.getLogger("torch._inductor.runtime.coordinate_descent_tuner")
        tuner.setLevel(logging.DEBUG)
        tuner.addHandler(logging.FileHandler(args.log_tuning))
    batches = args.batches
    base = settings_given(parser, args.set)
    results: list[dict] = []
    failed = 0
    for name in args.ways:
        with settings.use(way_settings(name, base)):  # the fused forward takes current() when it is built
            failed += not run_way(name, args, batches, results)
        torch.compiler.reset()
        torch.cuda.empty_cache()
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
