"""Where a tensor-parallel decode step's time goes: rank 0's kernels, all-reduces against the rest.

Both ranks capture the step (graph, or --fuse: inductor's layers) for one batch size, replay it the same
number of times, and rank 0 alone runs torch.profiler over its replays (CUPTI records the kernels a
CUDA graph launches). An all-reduce kernel's time includes its wait for the peer, so a rank running
ahead shows it there. The all-reduce kind is the `allreduce` setting's (--allreduce, or --set allreduce=KIND).

Run on two GPUs: PYTHONPATH=. python3 benchmarks/profile_tp.py recipes/llama-3.1-8b.yaml --batch 1 --fuse
Prints one summary line (and the top kernels with --top); writes JSON to --json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import torch
import typer

CLASSES = (  # first match wins; names as NCCL, torch's symmetric memory, cuBLAS and triton print them
    ("all-reduce", r"one_shot_all_reduce|two_shot_all_reduce|nccl.*allreduce"),
    ("all-gather", r"nccl.*allgather"),
    ("other nccl", r"nccl"),
    ("matmul", r"gemm|gemv|cutlass|nvjet|sm\d+_xmma|splitk|cublas"),
    ("attention", r"attention|fmha|flash|sdpa|softmax"),
    ("fused (triton)", r"^triton_"),
)


def kernel_class(name: str) -> str:
    lowered = name.lower()
    return next((label for label, pattern in CLASSES if re.search(pattern, lowered)), "other")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _kernels(step, calls: int, profiling: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    if not profiling:  # the peer runs the same calls: its collectives meet rank 0's
        for _ in range(calls):
            step()
        _sync()
        return {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        _sync()
    from profile_step import tally  # benchmarks/ is on the path of a script run from it

    return tally(prof, calls, kernel_class)


def rank_body(
    model: str,
    batch: int,
    cache: int,
    prompt: int,
    fuse: bool,
    device: str,
    top: int,
    json_path: str | None,
) -> None:
    from accelerate_graph import settings
    from accelerate_graph.core.buckets import parse_context_buckets
    from accelerate_graph.core.decode_session import draw_inputs
    from accelerate_graph.distributed.all_reduce import current_kind
    from accelerate_graph.distributed.rank import barrier, is_main_rank
    from accelerate_graph.pipeline import CaptureRequest, prepare

    request = CaptureRequest(
        model=model, buckets=(batch,), attn="grouped" if fuse else "sdpa", fuse=fuse, max_cache_len=cache,
        prompt_len=prompt, contexts=parse_context_buckets("full"), tp=2, device=device,
    )  # fmt: skip
    with settings.use(settings.resolve()):  # the settings main() gave every rank through the environment
        prepared = prepare(request)
    graphs, session = prepared.graphs, prepared.session
    prompt_ids, tokens = draw_inputs(batch, 1, prompt, session.vocab_size, seed=3)
    session.kv.reset()
    with torch.no_grad():
        session.prefill(prompt_ids)
    step_tokens = tokens[0].to(session.device)
    positions = torch.full((batch,), prompt, device=session.device)

    def step() -> None:
        session.kv.rewind(prompt)
        graphs.run(step_tokens, positions, copy=False)

    for _ in range(5):
        step()
    _sync()
    barrier()
    from profile_step import NOTHING_COUNTED, timed_ms

    step_ms, _host_ms = timed_ms(step)
    barrier()
    found = _kernels(step, 10, is_main_rank() and torch.cuda.is_available())
    barrier()
    if not is_main_rank():
        return
    way = "fused" if fuse else "graph"
    found = found or dict(NOTHING_COUNTED)
    reduce_us = found["by_class"].get("all-reduce", {}).get("us", 0.0)
    reduce_n = found["by_class"].get("all-reduce", {}).get("kernels", 0)
    line = (
        f"tp2 {way} batch {batch} allreduce {current_kind()}: step {step_ms:.3f} ms (replays); kernels "
        f"{found['kernel_us'] / 1000:.3f} ms in {found['kernels']:.0f}: all-reduce {reduce_us / 1000:.3f} ms in "
        f"{reduce_n:.0f} ({reduce_us / max(found['kernel_us'], 1e-9):.0%}), rest {(found['kernel_us'] - reduce_us) / 1000:.3f} ms | "
        + ", ".join(f"{k} {v['kernels']:.0f}/{v['us']:.0f}us" for k, v in found["by_class"].items())
    )
    print(line, flush=True)
    for name, us in list(found["by_kernel_us"].items())[:top]:
        print(f"    {us:8.2f} us  {name[:110]}", flush=True)
    if json_path:
        record = {"way": way, "batch": batch, "allreduce": current_kind(), "step_ms": step_ms, **found}
        from accelerate_graph.common.atomic_io import atomic_write_text

        atomic_write_text(json_path, json.dumps(record, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="recipes/llama-3.1-8b.yaml")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--fuse", action="store_true", help="the step compiled by inductor (bench's fused)")
    parser.add_argument("--device", default="auto", help="auto, or cpu for a smoke run over gloo")
    parser.add_argument("--allreduce", choices=("nccl", "oneshot"))
    parser.add_argument("--top", type=int, default=0, help="also print the N kernels that take longest")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting of both ranks")
    parser.add_argument("--json")
    args = parser.parse_args()
    from accelerate_graph import settings
    from accelerate_graph.distributed.launch import run_on_ranks
    from cli.tp import classify

    kwargs = {
        "model": args.model, "batch": args.batch, "cache": args.cache, "prompt": args.prompt, "fuse": args.fuse,
        "device": args.device, "top": args.top, "json_path": args.json,
    }  # fmt: skip
    try:
        assignments = settings.parse_assignments(args.set)
        if args.allreduce:
            assignments["allreduce"] = args.allreduce
        os.environ.update(settings.to_environment(settings.resolve(assignments)))  # the ranks' settings
        return run_on_ranks(2, rank_body, kwargs, classify)
    except typer.Exit as done:
        return done.exit_code
    except Exception as err:  # noqa: BLE001 - one line, as the CLI would say it
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
