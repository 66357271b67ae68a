"""One captured fused step timed four ways in one process, after what --before names was done first: why
`bench` and `profile_step.py` can disagree at batch 1, and what a process's earlier work costs a replay.

  back-to-back   profile_step's replay_ms: 50 replays between two events, the cache rewound once
  bench          bench's own time_calls: events around each step, the cache rewound before each
  no rewind      time_calls without the rewind (the write slot walks on, as in a decode loop)
  idle start     each step from an idle GPU (synchronized before it): adds the host's launch latency

--before: what the process did before capturing the timed fused graphs (one process per value)
  nothing        prepare(--fuse): the fused graphs alone (what `capture --fuse` does)
  plain          bench's path: the plan's plain graphs, then capture_fused on the same session
  plain-freed    the plain graphs captured, then released, then capture_fused
  fused-freed    the fused graphs captured, released, and captured again
  eager-first    HF's eager steps on another session of the model first, no graph
  tiny-mm        a CUDA graph of one cuBLAS matmul captured, replayed and freed first
  tiny-add       the same with one elementwise add, no cuBLAS
  side-stream    one stream more taken from torch's stream pool and used, no capture
  claimed-side-stream  the same after claim_capture_stream (what a --tp rank does before NCCL runs)
Under PDL a graph captured after work on a stream of the process's own replays slower (H200, Qwen2.5-0.5B:
0.641 against 0.625 ms at batch 1): one capture stream per device (core/backends/cuda.py) keeps our own
flows fast; side-stream and tiny-* still show the cost. --trace writes each replay's kernels and timeline.

Run on a GPU: PYTHONPATH=. python3 benchmarks/timing_gap.py qwen2.5-0.5b llama-3.2-1b:16384 --before plain
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from accelerate_graph import settings
from accelerate_graph.bench.timing import time_calls
from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.core.backends.cuda import claim_capture_stream
from accelerate_graph.pipeline import CaptureRequest, capture_fused, prepare
from benchmarks.profile_step import batch_sizes, profile_step, replay_ms, settings_given

STEPS, WARMUP = 30, 5
BEFORE = (
    *("nothing", "plain", "plain-freed", "fused-freed", "eager-first"),
    *("tiny-mm", "tiny-add", "side-stream", "claimed-side-stream"),
)
RECAPTURED = ("plain", "plain-freed", "fused-freed")  # the fused graphs come from a second capture


def fused_graphs(model: str, cache: int, batches: list[int], prompt: int, before: str):
    """The session and its fused graphs, after capturing what `before` names first."""
    request = CaptureRequest(model=model, buckets=batches, max_cache_len=cache, prompt_len=prompt)
    fused = replace(request, fuse=True)
    if before == "eager-first":  # HF's own decode steps (sdpa, cuBLAS) on a session that captures nothing
        eager = prepare(replace(request, mode="eager"))
        prompt_ids = torch.randint(eager.session.vocab_size, (max(batches), prompt), device=eager.session.device)
        eager.session.first_steps(prompt_ids, [(b, None) for b in batches])
        del eager
        release()
    if before in ("tiny-mm", "tiny-add"):
        capture_a_tiny_graph(before)
        release()
    if before == "claimed-side-stream":  # the capture stream claimed first (as a --tp rank does), then the same
        claim_capture_stream(torch.device("cuda", torch.cuda.current_device()))
    if before in ("side-stream", "claimed-side-stream"):  # one more stream from torch's pool, an add on it
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.ones(8, device="cuda").add_(1)
        torch.cuda.synchronize()
    if before not in RECAPTURED:
        prepared = prepare(fused)
        return prepared.session, prepared.graphs
    prepared = prepare(fused if before == "fused-freed" else request)
    if before in ("plain-freed", "fused-freed"):
        prepared.graphs = None
        release()
    return prepared.session, capture_fused(prepared, fused)


def capture_a_tiny_graph(kind: str) -> None:
    """Capture one small kernel in a CUDA graph (torch.mm: cuBLAS; else an add), replay it, free it."""
    x = torch.randn(8, 896, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(896, 896, device="cuda", dtype=torch.bfloat16)
    op = (lambda: torch.mm(x, w)) if kind == "tiny-mm" else (lambda: x + 1)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op()  # warm-up outside the capture (cuBLAS's handle and workspace, as torch.cuda.graph asks)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op()
    graph.replay()
    torch.cuda.synchronize()
    del graph


def release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def idle_start_ms(step, rewind, device: torch.device) -> float:
    """Median ms of a step timed by CUDA events from an idle GPU (synchronized before each)."""
    samples = []
    for i in range(STEPS):
        rewind(i)
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(i)
        end.record()
        torch.cuda.synchronize(device)
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def measure(model: str, cache: int, batches: list[int], prompt: int, before: str, trace: Path | None) -> None:
    session, graphs = fused_graphs(model, cache, batches, prompt, before)
    device = session.device
    for batch in batches:
        tokens = torch.randint(session.vocab_size, (STEPS + WARMUP, batch), device=device)
        positions = torch.full((batch,), prompt, device=device)

        def step(i: int, tokens=tokens, positions=positions) -> None:
            graphs.run(tokens[i], positions, copy=False)

        def rewind(_: int) -> None:
            session.kv.rewind(prompt)

        rows = {"back-to-back": replay_ms(graphs, session, batch, prompt)[0]}
        rows["bench"] = time_calls(step, rewind, STEPS, WARMUP, device).latency.median_ms
        session.kv.rewind(prompt)
        rows["no rewind"] = time_calls(step, lambda i: None, STEPS, WARMUP, device).latency.median_ms
        if device.type == "cuda":
            rows["idle start"] = idle_start_ms(step, rewind, device)
        session.kv.rewind(prompt)
        if trace:  # the replayed graph's kernels (CUPTI sees inside graphs), to diff one process against another
            found = profile_step(lambda: step(0), lambda: session.kv.rewind(prompt))
            trace.mkdir(parents=True, exist_ok=True)
            atomic_write_text(trace / f"{model}-{before}-{batch}.json", json.dumps(found, indent=1))
            print(
                f"{model} batch {batch} replayed: {found['kernels']:.0f} kernels, {found['kernel_us']:.1f} us of "
                f"kernels, busy {found['busy_us']:.1f} of a {found['span_us']:.1f} us span, idle {found['idle_us']:.1f}"
            )
            for edge, us, gaps in found["idle_before"]:
                print(f"    idle {us:7.2f} us in {gaps:4.0f} gaps  {edge}")
        print(
            f"{model} cache {cache} batch {batch}, before: {before}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in rows.items())
            + " ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model[:cache], cache 1024 by default")
    parser.add_argument("--batches", type=batch_sizes, default="1,8")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--trace", type=Path, help="a folder: write each replay's kernels there (profile_step's tally)")
    parser.add_argument("--before", default="nothing", choices=BEFORE)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting of the captures")
    args = parser.parse_args()
    batches = list(args.batches)
    chosen = settings_given(parser, args.set)
    for entry in args.models:
        model, _, cache = entry.partition(":")
        with settings.use(chosen):
            measure(model, int(cache or 1024), batches, args.prompt, args.before, args.trace)
        torch.compiler.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
