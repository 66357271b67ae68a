"""`cugraph-accel eval` as a library call: score the windows through every arm, measure, judge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.eval.bootstrap import LEVEL, RESAMPLES, SEED, Interval, Resampler
from accelerate_graph.eval.measures import ArmMeasures, measure_all
from accelerate_graph.eval.runs import Arm, score_windows
from accelerate_graph.eval.verdict import DEFAULT_MARGIN, criterion_line
from accelerate_graph.eval.windows import Windows


@dataclass
class Evaluation:
    windows: Windows
    reference_ppl: Interval
    arms: list[ArmMeasures]
    margin: float
    resamples: int
    seed: int

    @property
    def judged(self) -> list[ArmMeasures]:
        return [arm for arm in self.arms if arm.verdict is not None]

    @property
    def failed(self) -> list[ArmMeasures]:
        return [arm for arm in self.judged if not arm.verdict.passed]

    @property
    def passed(self) -> bool:
        return not self.failed

    def as_json(self) -> dict:
        return {
            "passed": self.passed,
            "criterion": criterion_line(self.margin),
            "margin": self.margin,
            "windows": self.windows.count,
            "window_len": self.windows.length,
            "scored_tokens": self.windows.count * self.windows.scored_per_window,
            "text_tokens": self.windows.total_tokens,
            "bootstrap": {"resamples": self.resamples, "level": LEVEL, "seed": self.seed, "unit": "window"},
            "reference": {"name": "float32", "ppl": self.reference_ppl.as_json()},
            "arms": [arm.as_json() for arm in self.arms],
        }


def evaluate(
    session: DecodeSession,
    windows: Windows,
    arms: list[Arm],
    rows: int | None = None,
    margin: float = DEFAULT_MARGIN,
    seed: int = SEED,
    resamples: int = RESAMPLES,
    on_batch: Callable[[int], None] | None = None,
) -> Evaluation:
    """Every arm over `windows` (in batches of `rows`, default the session's largest batch) against the
    float32 reference of the same weights; the arms other than the baseline judged against it."""
    reference_nll, scores = score_windows(session, windows, arms, rows or session.max_batch, on_batch)
    resampler = Resampler(windows.count, resamples, seed)
    reference_ppl, measured = measure_all(arms, scores, reference_nll, resampler, margin)
    return Evaluation(windows, reference_ppl, measured, margin, resamples, seed)
