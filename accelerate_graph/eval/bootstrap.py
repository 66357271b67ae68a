"""Paired bootstrap over windows: every statistic of one resample reads the same windows, so a
difference between two runs keeps what their windows share (the text's hard and easy parts) out of
its spread. Windows, not tokens, are the unit: a window's tokens depend on each other through its
cache, the windows on nothing but the text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A statistic of all windows and its two-sided LEVEL percentile interval over the resamples."""

    value: float
    low: float
    high: float

    def as_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}


class Resampler:
    """One fixed draw of `resamples` resamples of `windows` window indices (seeded), shared by every
    statistic of an evaluation: all intervals come from the same resamples."""

    def __init__(self, windows: int, resamples: int = RESAMPLES, seed: int = SEED):
        generator = torch.Generator().manual_seed(seed)
        self.index = torch.randint(0, windows, (resamples, windows), generator=generator)
        self.seed = seed

    def interval(self, statistic: Callable[..., torch.Tensor], *per_window: torch.Tensor) -> Interval:
        """`statistic` of the window means of each `per_window` tensor [windows] (float64), with its interval.
        `statistic` takes one tensor of means per input, scalars for the point value, [resamples] for the rest."""
        data = [x.double() for x in per_window]
        value = float(statistic(*[x.mean() for x in data]))
        resampled = statistic(*[x[self.index].mean(dim=1) for x in data])
        tail = (1 - LEVEL) / 2
        low, high = torch.quantile(resampled, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
        return Interval(value, low, high)

    def mean(self, per_window: torch.Tensor) -> Interval:
        return self.interval(lambda m: m, per_window)
