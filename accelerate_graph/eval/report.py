"""An evaluation in words and cells: the table's columns and rows (the CLI draws them) and the verdict
lines. Intervals read `value [low, high]`."""

from __future__ import annotations

from accelerate_graph.eval.bootstrap import Interval
from accelerate_graph.eval.evaluation import Evaluation
from accelerate_graph.eval.verdict import criterion_line

COLUMNS = (
    "arm",
    "PPL",
    "ΔPPL vs float32",
    "KL mean",
    "KL median / p99 / max",
    "same top",
    "|ΔNLL| mean",
    "ΔKL vs eager",
    "Δ|ΔNLL| vs eager",
    "verdict",
)


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"  # a perplexity whole, a KL in 3 digits


def _interval(interval: Interval | None, percent: bool = False) -> str:
    if interval is None:
        return ""
    if percent:
        return f"{interval.value:.1%} [{interval.low:.1%}, {interval.high:.1%}]"
    return f"{_number(interval.value)} [{_number(interval.low)}, {_number(interval.high)}]"


def table_rows(evaluation: Evaluation) -> list[tuple[str, ...]]:
    """The reference's row, then one per arm (COLUMNS)."""
    rows = [("float32 reference", _interval(evaluation.reference_ppl), *[""] * (len(COLUMNS) - 2))]
    for arm in evaluation.arms:
        verdict = (
            "baseline"
            if arm.baseline
            else "measured"
            if arm.verdict is None
            else "pass"
            if arm.verdict.passed
            else "FAIL"
        )
        rows.append(
            (
                arm.name,
                _interval(arm.ppl),
                _interval(arm.delta_ppl),
                _interval(arm.kl_mean),
                " / ".join(_number(v) for v in (arm.kl_median, arm.kl_p99, arm.kl_max)),
                _interval(arm.same_top, percent=True),
                _interval(arm.nll_error),
                _interval(arm.kl_vs_baseline),
                _interval(arm.nll_error_vs_baseline),
                verdict,
            )
        )
    return rows


def title(evaluation: Evaluation) -> str:
    windows = evaluation.windows
    return (
        f"{windows.count} windows x {windows.length} tokens ({windows.count * windows.scored_per_window} scored, "
        f"teacher-forced decode steps); intervals: {evaluation.resamples} paired bootstrap resamples of the windows"
    )


def verdict_lines(evaluation: Evaluation) -> list[str]:
    """One line per judged arm, and the rule."""
    lines = [f"gate: {criterion_line(evaluation.margin)}."]
    for arm in evaluation.judged:
        lines.append(f"{arm.name}: {arm.verdict.line()}")
    return lines


COST_COLUMNS = ("weights", "KL mean", "KL p99", "same top", "ΔPPL vs float32", "ΔPPL vs baseline")


def cost_rows(evaluation: Evaluation, baseline: str, label: str, names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """What other weights cost (COST_COLUMNS): the baseline arm's row, labelled `label` (its dtype), then each
    arm of `names`, against the same float32 reference."""
    by_name = {arm.name: arm for arm in evaluation.arms}
    base = by_name[baseline]
    rows = []
    for name in (baseline, *names):
        arm = by_name[name]
        rows.append(
            (
                label if name == baseline else name,
                _interval(arm.kl_mean),
                _number(arm.kl_p99),
                _interval(arm.same_top, percent=True),
                _interval(arm.delta_ppl),
                "" if name == baseline else _number(arm.ppl.value - base.ppl.value),
            )
        )
    return rows
