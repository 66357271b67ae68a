"""Per-token scores to the numbers a user reads: perplexity and its difference from the reference's,
the KL distribution, the share of tokens with the reference's top token, the NLL error, each mean
with its paired-bootstrap interval over windows, and the verdict of each arm against eager."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from accelerate_graph.eval.bootstrap import Interval, Resampler
from accelerate_graph.eval.runs import Arm, TokenScores
from accelerate_graph.eval.verdict import Verdict, judge


@dataclass
class ArmMeasures:
    name: str
    baseline: bool
    ppl: Interval
    delta_ppl: Interval  # this arm's perplexity - the reference's
    kl_mean: Interval
    kl_median: float
    kl_p99: float
    kl_max: float
    same_top: Interval  # share of tokens
    nll_error: Interval  # mean |NLL - reference NLL| per token
    kl_vs_baseline: Interval | None = None  # (this arm - eager), mean KL
    nll_error_vs_baseline: Interval | None = None
    verdict: Verdict | None = None  # None: the baseline itself

    def as_json(self) -> dict:
        intervals = {
            key: value.as_json()
            for key, value in vars(self).items()
            if isinstance(value, Interval)  # the optional differences are left out where None
        }
        return {
            "name": self.name,
            "baseline": self.baseline,
            **intervals,
            "kl_median": self.kl_median,
            "kl_p99": self.kl_p99,
            "kl_max": self.kl_max,
            "passed": None if self.verdict is None else self.verdict.passed,
            "failures": [] if self.verdict is None else self.verdict.failures,
        }


def _quantile(values: torch.Tensor, q: float) -> float:
    """Nearest-rank quantile of any number of values (torch.quantile refuses more than 2^24)."""
    ordered = values.flatten().double().sort().values
    return float(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]) if len(ordered) else 0.0


def _ppl(mean_nll: torch.Tensor) -> torch.Tensor:
    return torch.exp(mean_nll)


def measure_arm(arm: Arm, scores: TokenScores, reference_nll: torch.Tensor, resampler: Resampler) -> ArmMeasures:
    per_window_nll = scores.nll.double().mean(dim=1)
    reference = reference_nll.double().mean(dim=1)
    return ArmMeasures(
        name=arm.name,
        baseline=arm.baseline,
        ppl=resampler.interval(_ppl, per_window_nll),
        delta_ppl=resampler.interval(lambda a, r: _ppl(a) - _ppl(r), per_window_nll, reference),
        kl_mean=resampler.mean(scores.kl.double().mean(dim=1)),
        kl_median=_quantile(scores.kl, 0.5),
        kl_p99=_quantile(scores.kl, 0.99),
        kl_max=float(scores.kl.max()),
        same_top=resampler.mean(scores.same_top.double().mean(dim=1)),
        nll_error=resampler.mean(_nll_error(scores, reference_nll)),
    )


def _difference(arm: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    return arm - baseline


def _nll_error(scores: TokenScores, reference_nll: torch.Tensor) -> torch.Tensor:
    """Per window: the mean |NLL - reference NLL| over its tokens (errors of both signs both count)."""
    return (scores.nll.double() - reference_nll.double()).abs().mean(dim=1)


def measure_all(
    arms: list[Arm],
    scores: dict[str, TokenScores],
    reference_nll: torch.Tensor,
    resampler: Resampler,
    margin: float,
) -> tuple[Interval, list[ArmMeasures]]:
    """The reference's perplexity, and every arm's measures; the arms other than the baseline judged
    against it (paired: the same resamples of the same windows)."""
    reference_ppl = resampler.interval(_ppl, reference_nll.double().mean(dim=1))
    measured = [measure_arm(arm, scores[arm.name], reference_nll, resampler) for arm in arms]
    base = next((arm for arm in arms if arm.baseline), None)
    if base is None:
        return reference_ppl, measured
    base_kl = scores[base.name].kl.double().mean(dim=1)
    base_error = _nll_error(scores[base.name], reference_nll)
    for arm, result in zip(arms, measured):
        if arm.baseline or not arm.judged:
            continue
        result.kl_vs_baseline = resampler.interval(_difference, scores[arm.name].kl.double().mean(dim=1), base_kl)
        result.nll_error_vs_baseline = resampler.interval(
            _difference, _nll_error(scores[arm.name], reference_nll), base_error
        )
        baseline_means = {"kl": float(base_kl.mean()), "nll_error": float(base_error.mean())}
        result.verdict = judge(
            {"kl": result.kl_vs_baseline, "nll_error": result.nll_error_vs_baseline}, baseline_means, margin
        )
    return reference_ppl, measured
