"""The interface both graph backends implement: capture a zero-argument step, replay it later.

A step reads only static tensors (the session's input buffers and cache) and returns a tensor.
After capture, `replay()` re-executes the recorded work and writes into `output`, the same tensor
object every time: callers copy out what they keep before the next replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

Step = Callable[[], torch.Tensor]


@dataclass
class CaptureStats:
    seconds: float  # warm-ups + capture, wall clock
    memory_bytes: int  # memory the graph holds beyond what existed before it


class CapturedGraph(Protocol):
    output: torch.Tensor
    stats: CaptureStats

    def replay(self) -> torch.Tensor: ...


class GraphBackend(Protocol):
    name: str  # "cuda-graph" or "emulated"

    def capture(
        self, step: Step, warmups: int = 2, islands: Sequence[torch.nn.Module] = (), batch: int = 0
    ) -> CapturedGraph:
        """Record `step`; each module in `islands` runs eagerly between graph segments. `batch`: the rows the
        step runs (0: not a decode step), for settings chosen by batch."""
        ...

    def synchronize(self) -> None: ...

    def release(self) -> None:
        """Return memory of dropped graphs to the device."""
        ...
