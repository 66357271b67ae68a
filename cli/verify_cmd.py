"""`cugraph-accel verify`: replay vs eager for every bucket and a padded batch in each."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from .errors import guarded
from .options import BucketsOpt, ForceFlag, JsonOpt, ModelArg, PlanOpt, PromptLenOpt, buckets_or_none
from .output import STDOUT, Output

StepsOpt = Annotated[int, typer.Option("--steps", min=1, help="Decode steps compared per batch.")]


def shortened_runs(rows, steps: int) -> str | None:
    """One line when the cache had no room for --steps steps after the prompt (verify ran fewer)."""
    short = sorted({r.steps for r in rows if r.steps < steps})
    if not short:
        return None
    return (
        f"{sum(r.steps < steps for r in rows)} of {len(rows)} batches ran {', '.join(map(str, short))} "
        f"step(s), not --steps {steps}: the cache has no room for more after the prompt "
        "(capture with a larger --max-cache-len, or lower --prompt-len)."
    )


@guarded
def verify(
    model: ModelArg = None,
    plan: PlanOpt = None,
    steps: StepsOpt = 8,
    prompt_len: PromptLenOpt = None,
    buckets: BucketsOpt = None,
    json: JsonOpt = None,
    force: ForceFlag = False,
) -> None:
    """Re-capture from the plan (or MODEL) and prove every replay matches eager execution.

    Exit code 1 names the first failing bucket and step.

    Examples:

      cugraph-accel verify                       # reads ./cugraph-accel.plan.yaml

      cugraph-accel verify --plan my.plan.yaml --json verify.json

      cugraph-accel verify qwen2.5-0.5b --steps 16 --buckets 1,8
    """
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.verify.against_eager import verify_graphs

    from .common import prepare_with_progress, request_for
    from .tables import verify_table

    out = Output(json)
    if json not in (None, STDOUT):
        check_writable(json, "JSON results", force)
    request, source = request_for(model, plan, out, buckets=buckets_or_none(buckets), prompt_len=prompt_len)
    prepared = prepare_with_progress(request, out, source)
    if prepared.graphs is None:
        out.line("the plan runs the decode step eagerly: there is no graph to verify.")
        out.emit_json({"passed": True, "rows": [], "mode": "eager", "notes": prepared.notes})
        return
    rows = verify_graphs(prepared.graphs, steps=steps, prompt_len=prepared.plan.prompt_len)
    out.show(verify_table(rows))
    notes = list(prepared.notes)
    if shortened := shortened_runs(rows, steps):
        out.note(shortened)
        notes.append(shortened)
    failed = [r for r in rows if not r.passed]
    out.emit_json({"passed": not failed, "steps_requested": steps, "rows": [asdict(r) for r in rows], "notes": notes})
    if failed:
        first = failed[0]
        out.line(
            f"[red]verify failed[/red] for {len(failed)} of {len(rows)} batches; first: bucket {first.bucket}, "
            f"batch {first.batch}: {first.detail}"
        )
        raise typer.Exit(1)
    out.line(
        f"[green]verified[/green]: {len(rows)} batches across {len(prepared.graphs.buckets)} buckets "
        f"match eager execution."
    )
