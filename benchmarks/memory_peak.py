"""Where the peak device memory of a capture + verify goes, beyond weights and one KV cache (the scenario of
tests/core/test_gpu_memory.py: verify at bucket 32 over a 32,768-slot cache).

Runs the test's scenario on a GPU with the allocator's history on, and prints: the peak of each phase
(capture, verify) beyond weights + cache, then the allocations alive at the overall peak, grouped by
the first frame of this repository (or torch/transformers) that made them, largest first.

  PYTHONPATH=. python3 benchmarks/memory_peak.py [--slots 32768] [--top 12]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_models import tiny_decoder  # noqa: E402

from accelerate_graph.compat.torch_internals import cuda_memory_history, cuda_memory_snapshot  # noqa: E402
from accelerate_graph.core.backends import backend_for  # noqa: E402
from accelerate_graph.core.capture import capture_decode_graphs  # noqa: E402
from accelerate_graph.core.decode_session import DecodeSession  # noqa: E402
from accelerate_graph.core.memory import weight_bytes  # noqa: E402
from accelerate_graph.verify.against_eager import verify_graphs  # noqa: E402

MiB = 2**20


def live_at_peak(trace: list[dict]) -> tuple[int, list[dict]]:
    """Replay the allocator's trace: the largest total of live blocks, and the blocks alive then."""
    live: dict[int, dict] = {}
    total = peak = 0
    at_peak: list[dict] = []
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
            if total > peak:
                peak, at_peak = total, list(live.values())
        elif event["action"] in ("free_completed",) and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
    return peak, at_peak


def where(event: dict) -> str:
    """The first frame that is ours, else the first of torch or transformers, as file:line function."""
    frames = event.get("frames") or []
    for wanted in ("accelerate_graph", "transformers", "torch"):
        for frame in frames:
            if wanted in frame["filename"] and "memory_peak" not in frame["filename"]:
                return f"{frame['filename'].split('site-packages/')[-1]}:{frame['line']} {frame['name']}"
    return "(no Python frame: a kernel's workspace or a graph pool)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=32768)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    gpu = torch.device("cuda:0")
    model = tiny_decoder("llama", num_key_value_heads=4).to(gpu)
    cuda_memory_history(True)
    torch.cuda.reset_peak_memory_stats(gpu)
    session = DecodeSession(model, 32, args.slots)
    cache = sum(layer.keys.nbytes + layer.values.nbytes for layer in session.kv.layers)
    base = cache + weight_bytes(model)
    graphs = capture_decode_graphs(session, backend_for(gpu), (8, 32))
    captured = torch.cuda.max_memory_allocated(gpu) - base
    torch.cuda.reset_peak_memory_stats(gpu)
    rows = verify_graphs(graphs, steps=8, prompt_len=4)
    verified = torch.cuda.max_memory_allocated(gpu) - base
    snapshot = cuda_memory_snapshot()
    cuda_memory_history(False)
    print(
        f"cache {cache / MiB:.0f} MiB, weights {weight_bytes(model) / MiB:.1f} MiB; verify passed: {all(r.passed for r in rows)}"
    )
    print(f"beyond weights + cache: capture peak {captured / MiB:.0f} MiB, verify peak {verified / MiB:.0f} MiB")
    trace = [event for device in snapshot["device_traces"] for event in device]
    peak, alive = live_at_peak(trace)
    groups: dict[str, list[int]] = defaultdict(list)
    for event in alive:
        groups[where(event)].append(event["size"])
    print(f"alive at the traced peak ({peak / MiB:.0f} MiB in {len(alive)} blocks), largest groups first:")
    for place, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[: args.top]:
        print(f"  {sum(sizes) / MiB:9.1f} MiB in {len(sizes):4d} block(s)  {place}")


if __name__ == "__main__":
    main()
