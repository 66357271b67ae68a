"""Capture one decode graph per bucket, largest first, and dispatch batches to them."""

from __future__ import annotations

import gc
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from .backends import CapturedGraph, GraphBackend
from .buckets import bucket_for
from .decode_session import DecodeSession


@dataclass
class BucketCapture:
    bucket: int
    seconds: float
    memory_bytes: int


@contextmanager
def frozen_gc() -> Iterator[None]:
    """No garbage collection during capture: a collection can free memory a graph still points at."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class DecodeGraphs:
    """Replays the graph of the smallest bucket that fits a batch; larger batches run eagerly, counted."""

    def __init__(self, session: DecodeSession, graphs: dict[int, CapturedGraph]):
        self.session = session
        self.graphs = graphs
        self.buckets = tuple(sorted(graphs))
        self.eager_fallbacks = 0

    def captures(self) -> list[BucketCapture]:
        return [
            BucketCapture(b, self.graphs[b].stats.seconds, self.graphs[b].stats.memory_bytes)
            for b in reversed(self.buckets)
        ]

    def run(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Next-token logits [b, V] for tokens/positions [b]. The result is overwritten by the next
        call: clone what you keep."""
        batch = tokens.shape[0]
        bucket = bucket_for(batch, self.buckets)
        if bucket is None:
            self._note_fallback(batch)
            return self.eager(tokens, positions)
        self.session.load_inputs(bucket, tokens, positions)
        return self.graphs[bucket].replay()[:batch]

    def eager(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The same step without graphs: the reference `verify` compares against."""
        batch = tokens.shape[0]
        self.session.load_inputs(batch, tokens, positions)
        with torch.no_grad():
            return self.session.step_fn(batch)()

    def _note_fallback(self, batch: int) -> None:
        if self.eager_fallbacks == 0:
            warnings.warn(
                f"batch {batch} is larger than the largest captured bucket {self.buckets[-1]}: "
                "running it eagerly (slow). Add a larger bucket to --buckets.",
                stacklevel=3,
            )
        self.eager_fallbacks += 1


def capture_decode_graphs(
    session: DecodeSession,
    backend: GraphBackend,
    buckets: tuple[int, ...],
    on_captured: Callable[[BucketCapture], None] | None = None,
    islands: Sequence[torch.nn.Module] = (),
) -> DecodeGraphs:
    """Capture every bucket, largest first (smaller graphs reuse the pool it grew), then reset the
    cache: warm-ups wrote into it."""
    graphs: dict[int, CapturedGraph] = {}
    with frozen_gc():
        for bucket in sorted(buckets, reverse=True):
            session.kv.rewind(0)
            graphs[bucket] = backend.capture(session.step_fn(bucket), islands=islands)
            if on_captured:
                stats = graphs[bucket].stats
                on_captured(BucketCapture(bucket, stats.seconds, stats.memory_bytes))
    backend.synchronize()
    session.kv.reset()
    return DecodeGraphs(session, graphs)
