"""`cugraph-accel tune`: the skinny kernels' configs (or, `--weights fp8|fp8-block`, the FP8 kernel's) for MODEL
chosen on the GPU at hand, into its tuning table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from .common import resolve_settings, settings_assignments
from .errors import guarded
from .options import JsonOpt, RevisionOpt, SetOpt
from .output import STDOUT, Output

if TYPE_CHECKING:
    from accelerate_graph.tune.run import TuneReport

# tune/run.py's DEFAULT_BUDGET_S, repeated so that --help needs no torch
DEFAULT_BUDGET_S = 480.0

TuneModelArg = Annotated[
    str,
    typer.Argument(help="A built-in recipe (see `cugraph-accel recipes`), a recipe .yaml, a model folder or a hub id."),
]
TuneBucketsOpt = Annotated[
    str | None,
    typer.Option(
        "--buckets", help="Row buckets to sweep, some of 1,8,16,32 (default: all; with FP8 weights some of 1,8,16)."
    ),
]
BudgetOpt = Annotated[
    float, typer.Option("--budget-s", min=0, help="Seconds of trying configs, shared among the buckets.")
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="The table to write (default: the user's table for this GPU, under ~/.cache)."),
]
TuneWeightsOpt = Annotated[
    str,
    typer.Option(
        "--weights",
        metavar="KIND",
        help="model (default: the weights as loaded; the skinny kernels' table), fp8 (the decoder's Linear layers "
        "in FP8 e4m3, a scale per output channel) or fp8-block (a scale per 128x128 block): the FP8 kernel's "
        "table, fp8-<GPU>.json, at 1-32 rows (docs/FP8.md).",
    ),
]
CompileWorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--compile-workers",
        min=0,
        help="With FP8 weights: processes that compile the configs the sweep tries next (default: the CPUs but 2, "
        "at most 12; 0: none).",
    ),
]
TuneForceFlag = Annotated[
    bool,
    typer.Option("--force", help="Replace a table at --out that cannot be merged into (unreadable, another GPU's)."),
]


def tune_table(report: TuneReport) -> Table:
    """Per bucket: the chain's microseconds per layer with the table before, with the configs chosen, and on
    inductor's kernels and cuBLAS; what was written and the configs."""
    from accelerate_graph.tune.grids import describe

    weights = "" if report.weights == "model" else f", weights {report.weights}"
    table = Table(title=f"tune: {report.shapes.model} on {report.device}{weights}, us per decoder layer")
    for column in ("rows", "before", "chosen", "inductor", "written", "configs chosen"):
        table.add_column(column, justify="right" if column in ("rows", "before", "chosen", "inductor") else "left")
    for result in report.results:
        table.add_row(
            str(result.rows),
            f"{result.before_us:.2f}",
            f"{result.chosen_us:.2f}",
            "-" if result.inductor_us is None else f"{result.inductor_us:.2f}",
            _written(result),
            "\n".join(f"{op} {describe(cfg)}" for op, cfg in result.chosen.items()),
        )
    return table


def _cut_short_line(result) -> str:
    """What the budget left untried in a bucket, and what became of those ops."""
    counts = ", ".join(f"{op} {tried} of {size}" for op, (tried, size) in result.cut_short.items())
    kept = f"; not written: {', '.join(sorted(result.unreached))}" if result.unreached else ""
    return (
        f"{result.rows} row(s): the budget ran out, configs tried: {counts}{kept}; a larger --budget-s tries the rest"
    )


def _written(result) -> str:
    if not result.written:
        return "no: inductor's is faster"
    if result.unchecked:
        return f"yes, but {', '.join(sorted(result.unchecked))}: no config agreed with the reference"
    return "yes"


@guarded
def tune(
    model: TuneModelArg,
    buckets: TuneBucketsOpt = None,
    budget_s: BudgetOpt = DEFAULT_BUDGET_S,
    out: OutOpt = None,
    force: TuneForceFlag = False,
    revision: RevisionOpt = None,
    weights: TuneWeightsOpt = "model",
    compile_workers: CompileWorkersOpt = None,
    assignments: SetOpt = None,
    json: JsonOpt = None,
) -> None:
    """Sweep the skinny kernels' configs for MODEL's shapes on this GPU and write its tuning table.

    Later runs on a GPU of this name read it; the bench header names the table that served.

    At batch 1 only configs that beat inductor's kernels and cuBLAS are written.

    With --weights fp8 or fp8-block: the FP8 kernel's configs at 1, 8, 16 and 32 rows, into its own table.

    An FP8 config is kept only where its product agrees with the reference.

    Examples:

      cugraph-accel tune llama-3.1-8b

      cugraph-accel tune qwen2.5-0.5b --buckets 1 --budget-s 120

      cugraph-accel tune llama-3.1-8b --weights fp8-block
    """
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.core.buckets import parse_buckets
    from accelerate_graph.tune.run import run_tune

    output = Output(json)
    if json and json != STDOUT:
        check_writable(json, "results", force=False)
    resolve_settings(settings_assignments(assignments))  # the chain runs the kernels under them
    chosen_buckets = parse_buckets(buckets) if buckets is not None else None
    report = run_tune(model, chosen_buckets, budget_s, out, force, revision, output.line, weights, compile_workers)
    output.show(tune_table(report))
    for result in report.results:
        for line in result.wrong:
            output.line(f"{result.rows} row(s): disagreed with the reference, left out: {line}")
        if result.cut_short:
            output.line(_cut_short_line(result))
    if report.added or report.changed:
        output.line(f"written: {report.path} ({report.added} entries added, {report.changed} changed)")
    else:
        output.line(f"nothing new for {report.path}")
    output.emit_json(report.to_dict())
