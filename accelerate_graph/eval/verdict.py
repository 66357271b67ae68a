"""The gate (docs/EVAL.md says why): an arm passes when neither its KL from the float32 reference nor
its NLL error against it is measurably worse than eager's in the model's own dtype.

Measurably worse: the paired-bootstrap interval of (arm - eager), per-token mean, lies wholly above
`margin` x eager's mean plus NOISE_FLOOR. An arm that runs eager's kernels (a graph replay) differs from
it by nothing or by noise of both signs, and passes; a systematic error, however small per token, shifts
every window the same way and fails once the windows are enough to show it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from accelerate_graph.eval.bootstrap import LEVEL, Interval

GATE_FAILED_EXIT = 3  # distinct from a bad input (2) and a run that could not be made (1)
DEFAULT_MARGIN = 0.0
# nats per token: below float32's own rounding of a log-softmax, so a float32 model's replay is not failed
# for differences no run can avoid
NOISE_FLOOR = 1e-6

MEASURES = {"kl": "mean KL from the reference", "nll_error": "mean |NLL - reference NLL|"}


@dataclass
class Verdict:
    passed: bool
    failures: list[str] = field(default_factory=list)  # one sentence per measure that is worse

    def line(self) -> str:
        return "pass" if self.passed else "; ".join(self.failures)


def judge(differences: dict[str, Interval], baseline: dict[str, float], margin: float = DEFAULT_MARGIN) -> Verdict:
    """`differences`: measure -> interval of (arm - eager) per-token mean; `baseline`: eager's means."""
    failures = []
    for measure, words in MEASURES.items():
        difference, allowed = differences[measure], margin * baseline[measure] + NOISE_FLOOR
        if math.isnan(difference.low) or math.isnan(difference.value):  # NaN compares false: it would pass
            failures.append(f"{words} is not a number: the arm gave NaN log-probabilities")
        elif difference.low > allowed:
            failures.append(
                f"{words} is worse than eager's by {difference.value:.3g} nats/token "
                f"({LEVEL:.0%} interval {difference.low:.3g} .. {difference.high:.3g}, allowed {allowed:.3g})"
            )
    return Verdict(not failures, failures)


def criterion_line(margin: float) -> str:
    allowance = f"{margin:g} x eager's mean + {NOISE_FLOOR:g}" if margin else f"{NOISE_FLOOR:g} nats"
    return (
        f"an arm fails when the {LEVEL:.0%} paired-bootstrap interval of (arm - eager) in mean KL or mean NLL "
        f"error against the float32 reference lies wholly above {allowance}"
    )
