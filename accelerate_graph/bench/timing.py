"""Time regions the same way for every contender: CUDA events on a GPU, host clocks elsewhere.

Steps are timed one by one (device events around each call, read after one synchronize at the end),
so a contender's median, p10 and p90 come from the same kind of samples as every other's. Setup work
(warm-ups, capture, compilation, first calls) is timed apart with the wall clock, synchronized.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

DRIFT_LIMIT = 0.05  # medians of the two halves of a run further apart than this: not a stable median


@dataclass
class Latency:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int
    drift: float  # |median of first half - median of second half| / median: is the median stable?

    @classmethod
    def of(cls, samples_ms: list[float]) -> Latency:
        if not samples_ms:
            raise ValueError("no samples to summarise")
        median = statistics.median(samples_ms)
        if len(samples_ms) < 2:
            return cls(median, median, median, 1, 0.0)
        deciles = statistics.quantiles(samples_ms, n=10, method="inclusive")
        half = len(samples_ms) // 2
        drift = abs(statistics.median(samples_ms[:half]) - statistics.median(samples_ms[half:])) / max(median, 1e-12)
        return cls(median, deciles[0], deciles[-1], len(samples_ms), drift)

    @property
    def stable(self) -> bool:
        return self.drift <= DRIFT_LIMIT


@dataclass
class Timed:
    latency: Latency
    warmup_seconds: float  # the untimed warm-up calls, wall clock


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_seconds(call: Callable[[], object], device: torch.device) -> float:
    """Wall-clock seconds of one call, device work included (synchronized on both sides)."""
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    return time.perf_counter() - start


def _host_samples(call: Callable[[int], object], before: Callable[[int], None], count: int) -> list[float]:
    samples = []
    for i in range(count):
        before(i)
        start = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples


def _event_samples(
    call: Callable[[int], object], before: Callable[[int], None], count: int, device: torch.device
) -> list[float]:
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


def time_calls(
    call: Callable[[int], object], before: Callable[[int], None], count: int, warmup: int, device: torch.device
) -> Timed:
    """Milliseconds of `call(i)` for i in range(warmup, warmup + count), after `warmup` untimed calls.
    `before(i)` runs before each call, outside the timed region."""

    def warm() -> None:
        for i in range(warmup):
            before(i)
            call(i)

    warmup_seconds = wall_seconds(warm, device)
    shifted, prepare = (lambda i: call(warmup + i)), (lambda i: before(warmup + i))
    if device.type == "cuda":
        samples = _event_samples(shifted, prepare, count, device)
    else:
        samples = _host_samples(shifted, prepare, count)
    return Timed(Latency.of(samples), warmup_seconds)
