"""`cugraph-accel verify`: replay vs eager for every bucket and a padded batch in each."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from accelerate_graph.distributed.single_device import against_single_device
from accelerate_graph.verify.against_eager import verify_graphs

from .common import prepare_with_progress, request_for
from .errors import guarded
from .options import BucketsOpt, JsonFlag, ModelArg, PlanOpt, PromptLenOpt, TpOpt, buckets_or_none
from .output import Output
from .tables import verify_table
from .tp import plan_device, plan_tp, spread

StepsOpt = Annotated[int, typer.Option("--steps", min=1, help="Decode steps compared per batch.")]


@guarded
def verify(
    model: ModelArg = None,
    plan: PlanOpt = None,
    steps: StepsOpt = 8,
    prompt_len: PromptLenOpt = None,
    buckets: BucketsOpt = None,
    json: JsonFlag = False,
    tp: TpOpt = None,
) -> None:
    """Re-capture from the plan (or MODEL) and prove every replay matches eager execution.

    Exit code 1 names the first failing bucket and step.

    Examples:

      cugraph-accel verify                       # reads ./cugraph-accel.plan.yaml

      cugraph-accel verify qwen2.5-0.5b --steps 16 --buckets 1,8
    """
    tp = plan_tp(tp, model, plan)
    if tp > 1 and spread(verify, dict(locals()), tp, plan_device(model, plan)):
        return
    out = Output(json)
    request = request_for(model, plan, out, buckets=buckets_or_none(buckets), prompt_len=prompt_len, tp=tp)
    prepared = prepare_with_progress(request, out)
    if prepared.graphs is None:
        out.line("the plan runs the decode step eagerly: there is no graph to verify.")
        out.emit_json({"passed": True, "rows": [], "mode": "eager"})
        return
    rows = verify_graphs(prepared.graphs, steps=steps, prompt_len=prepared.plan.prompt_len)
    out.show(verify_table(rows))
    if tp > 1:  # the split itself: the replay against the whole model on one device
        single = against_single_device(prepared.graphs, prepared.plan, steps)
        if single is not None:
            out.line(
                f"tp {tp} replay vs single-device eager (bucket {single.bucket}, {single.steps} steps): max abs "
                f"{single.max_abs:.1e}, rtol {single.rtol:g}: {'pass' if single.passed else 'FAIL ' + single.detail}"
            )
            rows.append(single)
    failed = [r for r in rows if not r.passed]
    out.emit_json({"passed": not failed, "rows": [asdict(r) for r in rows]})
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
