"""Decode-step latency, eager vs graph replay, per bucket.

Device events around each step (host clocks on the CPU); warm-ups excluded; the cache write
position is rewound between steps outside the timed region so every step does the same work.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .capture import DecodeGraphs


@dataclass
class Latency:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    @classmethod
    def of(cls, samples_ms: list[float]) -> "Latency":
        ordered = sorted(samples_ms)

        def pick(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return cls(statistics.median(ordered), pick(0.1), pick(0.9), len(ordered))


@dataclass
class BenchRow:
    bucket: int
    eager: Latency
    graph: Latency
    capture_seconds: float
    graph_memory_bytes: int

    @property
    def speedup(self) -> float:
        return self.eager.median_ms / self.graph.median_ms

    @property
    def graph_tokens_per_s(self) -> float:
        return self.bucket * 1000.0 / self.graph.median_ms


def time_calls(call: Callable[[int], object], before: Callable[[int], None], count: int, warmup: int,
               device: torch.device) -> list[float]:
    """Milliseconds of `call(i)` for i in range(count), after `warmup` untimed calls."""
    for i in range(warmup):
        before(i)
        call(i)
    if device.type != "cuda":
        samples = []
        for i in range(count):
            before(i)
            start = time.perf_counter()
            call(i)
            samples.append((time.perf_counter() - start) * 1000.0)
        return samples
    events = []
    for i in range(count):
        before(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(i)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in events]


def bench_bucket(graphs: DecodeGraphs, bucket: int, steps: int, warmup: int, prompt_len: int, seed: int = 0) -> BenchRow:
    session = graphs.session
    generator = torch.Generator().manual_seed(seed + bucket)
    prompt = torch.randint(0, session.vocab_size, (bucket, prompt_len), generator=generator)
    tokens = torch.randint(0, session.vocab_size, (warmup + steps, bucket), generator=generator).to(session.device)
    positions = torch.full((bucket,), prompt_len, device=session.device)
    session.kv.reset()
    session.prefill(prompt)

    def rewind(_: int) -> None:
        session.kv.rewind(prompt_len)

    with torch.no_grad():
        eager = time_calls(lambda i: graphs.eager(tokens[i], positions), rewind, steps, warmup, session.device)
        graph = time_calls(lambda i: graphs.run(tokens[i], positions), rewind, steps, warmup, session.device)
    session.kv.reset()
    stats = graphs.graphs[bucket].stats
    return BenchRow(bucket, Latency.of(eager), Latency.of(graph), stats.seconds, stats.memory_bytes)


def bench_graphs(graphs: DecodeGraphs, steps: int = 100, warmup: int = 10, prompt_len: int = 128,
                 on_row: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
    rows = []
    for bucket in graphs.buckets:
        row = bench_bucket(graphs, bucket, steps, warmup, prompt_len)
        rows.append(row)
        if on_row:
            on_row(row)
    return rows
