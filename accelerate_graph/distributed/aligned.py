"""Every rank warms up and captures the same bucket at the same time.

The collectives inside a step only meet their peers if every rank runs the same steps in the same
order; a barrier before each bucket's warm-ups and after its capture keeps the ranks in step, so a
rank that is slow (or failed) is noticed at the bucket, not somewhere inside a later replay.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from accelerate_graph.core.backends.base import CapturedGraph, GraphBackend, Step
from accelerate_graph.distributed.rank import barrier


class AlignedBackend:
    """A graph backend whose captures start and end together on every rank."""

    def __init__(self, inner: GraphBackend):
        self.inner = inner
        self.name = inner.name

    def capture(
        self, step: Step, warmups: int = 2, islands: Sequence[torch.nn.Module] = (), batch: int = 0
    ) -> CapturedGraph:
        barrier()
        graph = self.inner.capture(step, warmups, islands, batch)
        barrier()
        return graph

    def synchronize(self) -> None:
        self.inner.synchronize()

    def release(self) -> None:
        self.inner.release()
