"""`cugraph-accel tune`: the skinny kernels' configs for MODEL chosen on the GPU at hand, into its tuning table."""

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
TuneBucketsOpt = Annotated[str, typer.Option("--buckets", help="Row buckets to sweep, some of 1,8,16,32.")]
BudgetOpt = Annotated[
    float, typer.Option("--budget-s", min=0, help="Seconds of trying configs, shared among the buckets.")
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="The table to write (default: the user's table for this GPU, under ~/.cache)."),
]
TuneForceFlag = Annotated[
    bool,
    typer.Option("--force", help="Replace a table at --out that cannot be merged into (unreadable, another GPU's)."),
]


def tune_table(report: TuneReport) -> Table:
    """Per bucket: the chain's microseconds per layer with the table before, with the configs chosen, and on
    inductor's kernels and cuBLAS; what was written and the configs."""
    from accelerate_graph.tune.grids import describe

    table = Table(title=f"tune: {report.shapes.model} on {report.device}, us per decoder layer")
    for column in ("rows", "before", "chosen", "inductor", "written", "configs chosen"):
        table.add_column(column, justify="right" if column in ("rows", "before", "chosen", "inductor") else "left")
    for result in report.results:
        table.add_row(
            str(result.rows),
            f"{result.before_us:.2f}",
            f"{result.chosen_us:.2f}",
            f"{result.inductor_us:.2f}",
            "yes" if result.written else "no: inductor's is faster",
            "\n".join(f"{op} {describe(cfg)}" for op, cfg in result.chosen.items()),
        )
    return table


@guarded
def tune(
    model: TuneModelArg,
    buckets: TuneBucketsOpt = "1,8,16,32",
    budget_s: BudgetOpt = DEFAULT_BUDGET_S,
    out: OutOpt = None,
    force: TuneForceFlag = False,
    revision: RevisionOpt = None,
    assignments: SetOpt = None,
    json: JsonOpt = None,
) -> None:
    """Sweep the skinny kernels' configs for MODEL's shapes on this GPU and write its tuning table.

    Later runs on a GPU of this name read it; the bench header names the table that served.

    At batch 1 only configs that beat inductor's kernels and cuBLAS are written.

    Examples:

      cugraph-accel tune llama-3.1-8b

      cugraph-accel tune qwen2.5-0.5b --buckets 1 --budget-s 120
    """
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.core.buckets import parse_buckets
    from accelerate_graph.tune.run import run_tune

    output = Output(json)
    if json and json != STDOUT:
        check_writable(json, "results", force=False)
    resolve_settings(settings_assignments(assignments))  # the chain runs the kernels under them
    report = run_tune(model, parse_buckets(buckets), budget_s, out, force, revision, say=output.line)
    output.show(tune_table(report))
    if report.added or report.changed:
        output.line(f"written: {report.path} ({report.added} entries added, {report.changed} changed)")
    else:
        output.line(f"nothing new for {report.path}")
    output.emit_json(report.to_dict())
