"""Next-token choice on the device, right after the graph: no host read per token.

Sampling uses the exponential-race form of a categorical draw (argmax of p / E, E ~ Exp(1)), which
needs no `multinomial` and no host sync.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from accelerate_graph.common.errors import BadOptionError, option


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def check(self) -> Sampling:
        """One line per bad value, before any model is loaded."""
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise BadOptionError(
                f"{option('temperature', self.temperature)} is invalid.", "Use 0 (greedy) or a positive number."
            )
        if self.top_k < 0:
            raise BadOptionError(f"{option('top_k', self.top_k)} is invalid.", "Use 0 (no limit) or a positive count.")
        if not (0.0 < self.top_p <= 1.0):
            raise BadOptionError(f"{option('top_p', self.top_p)} is invalid.", "Use a value in (0, 1].")
        if self.greedy and (self.top_k or self.top_p < 1.0):
            raise BadOptionError(
                "{top_k} and {top_p} only apply when sampling.", "Give {temperature} above 0 as well (e.g. 0.7)."
            )
        return self


class Sampler:
    """Picks next tokens [b] from logits [b, V] with the device generator seeded once."""

    def __init__(self, sampling: Sampling, device: torch.device):
        self.sampling = sampling.check()
        self.generator = None
        if not sampling.greedy:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(sampling.seed if sampling.seed is not None else torch.seed())

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.sampling.greedy:
            return logits.argmax(-1)
        scores = logits.float() / self.sampling.temperature
        scores = _keep_top_k(scores, self.sampling.top_k)
        scores = _keep_top_p(scores, self.sampling.top_p)
        probs = torch.softmax(scores, dim=-1)
        race = torch.empty_like(probs).exponential_(generator=self.generator)
        return (probs / race).argmax(-1)


def _keep_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= scores.shape[-1]:
        return scores
    threshold = scores.topk(k, dim=-1).values[..., -1:]
    return scores.masked_fill(scores < threshold, -math.inf)


def _keep_top_p(scores: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of top tokens whose probability reaches `p` (the top token always)."""
    if p >= 1.0:
        return scores
    ordered, order = scores.sort(dim=-1, descending=True)
    cumulative = ordered.softmax(-1).cumsum(-1)
    drop = cumulative - ordered.softmax(-1) >= p  # mass before this token already reaches p
    return scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)
