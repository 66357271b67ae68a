"""`cugraph-accel verify`: replay vs eager for every captured graph, full and padded, and across context buckets."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from .errors import guarded
from .options import (
    AllReduceOpt,
    BucketsOpt,
    ForceFlag,
    JsonOpt,
    ModelArg,
    PlanOpt,
    PromptLenOpt,
    SetOpt,
    TpOpt,
    WeightsOpt,
    buckets_or_none,
)
from .output import Output

StepsOpt = Annotated[int, typer.Option("--steps", min=1, help="Decode steps compared per batch.")]
RepeatOpt = Annotated[
    int,
    typer.Option(
        "--repeat",
        min=1,
        help="Run the whole check N times, each with new prompts and tokens, and (after the first) new slots "
        "between each context bucket's first and last and new left padding (a false alarm shows up as a run "
        "that fails where the others pass).",
    ),
]
ThoroughFlag = Annotated[
    bool,
    typer.Option(
        "--thorough",
        help="Replay every graph 512 times before judging it (64 by default) and check 9 windows of slots per "
        "context bucket (3 by default): run it before serving.",
    ),
]


def shortened_line(plan, steps: int) -> str | None:
    """One line when some runs got fewer than --steps steps (their context bucket or the cache has no
    room for more); each one is in the JSON's `shortened`."""
    if not plan.shortened:
        return None
    first = plan.shortened[0]
    return (
        f"{len(plan.shortened)} of {len(plan.cases)} runs ran fewer than --steps {steps}; first: {first.line()} "
        "(capture with a larger --max-cache-len or wider context buckets for more)."
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
    tp: TpOpt = None,
    allreduce: AllReduceOpt = None,
    repeat: RepeatOpt = 1,
    assignments: SetOpt = None,
    weights: WeightsOpt = None,
    thorough: ThoroughFlag = False,
) -> None:
    """Re-capture from the plan (or MODEL) and prove every replay is as close to a float32 reference as eager.

    Exit code 1 names the first failing bucket and step.

    Examples:

      cugraph-accel verify                       # reads ./cugraph-accel.plan.yaml

      cugraph-accel verify --plan my.plan.yaml --json verify.json

      cugraph-accel verify qwen2.5-0.5b --steps 16 --buckets 1,8

      cugraph-accel verify llama-3.1-8b --repeat 5   # five checks with new inputs, one load and capture

      cugraph-accel verify --thorough                # before serving: longer runs, more slots
    """
    arguments = dict(locals())
    from .common import settings_assignments
    from .tp import plan_device, plan_tp, spread

    chosen = settings_assignments(assignments, allreduce)

    arguments["tp"] = tp = plan_tp(tp, model, plan)
    if tp > 1 and spread(verify, arguments, tp, plan_device(model, plan)):
        return
    from accelerate_graph.distributed.single_device import against_single_device
    from accelerate_graph.verify.against_eager import PhaseClock, verify_graphs
    from accelerate_graph.verify.cases import THOROUGH, VERIFY, describe_slots, plan_cases, sliding_window, uncovered
    from accelerate_graph.verify.criterion import CRITERION_LINE, criterion_summary
    from accelerate_graph.verify.reference import reference_json, steps_probe

    from .common import prepare_with_progress, report_memory, request_for
    from .tables import verify_table

    out = Output(json)
    out.check_json_writable(force)
    request, source = request_for(
        model,
        plan,
        out,
        chosen,
        buckets=buckets_or_none(buckets),
        prompt_len=prompt_len,
        tp=tp,
        weights=weights,
    )
    engine = request.settings.as_dict()
    prepared = prepare_with_progress(request, out, source)
    if prepared.graphs is None:
        out.line("the plan runs the decode step eagerly: there is no graph to verify.")
        out.emit_json({"passed": True, "rows": [], "mode": "eager", "settings": engine, "notes": prepared.notes})
        return
    graphs = prepared.graphs
    coverage = THOROUGH if thorough else VERIFY
    window = sliding_window(graphs.session.model.config)

    def plan_for(variant: int):
        shape = (graphs.buckets, graphs.contexts, steps, prepared.plan.prompt_len)
        return plan_cases(*shape, coverage=coverage.again(variant), window=window)

    cases = plan_for(0)
    clock = PhaseClock()
    replays: dict = {}  # each graph's replays so far: long runs are made once, not per repeat
    rows = verify_graphs(graphs, plan=cases, clock=clock, replays=replays)
    out.show(verify_table(rows))
    repeats = [_repeat_summary(1, rows)]
    every_case = list(cases.cases)
    for number in range(2, repeat + 1):  # new prompt, tokens, slots and padding: the seed moves by a stride
        moved = plan_for(number - 1)
        every_case += moved.cases
        again = verify_graphs(graphs, plan=moved, seed=REPEAT_SEED_STRIDE * (number - 1), clock=clock, replays=replays)
        repeats.append(_repeat_summary(number, again))
        out.line(_repeat_line(repeats[-1]))
        rows += again
    if tp > 1:  # the split itself: the replay against the whole model on one device
        single = against_single_device(graphs, prepared.plan, steps)
        if single is not None:
            out.line(
                f"tp {tp} replay vs the unsplit model (bucket {single.bucket}, {single.steps} steps): error against "
                f"its float32 reference {single.logit_err:.2g} (its own eager step's: {single.eager_err:.2g}), "
                f"max abs vs its eager {single.max_abs:.1e}: {'pass' if single.passed else 'FAIL ' + single.detail}"
            )
            rows.append(single)
    memory = report_memory(prepared, out, steps)
    out.line(clock.line())
    probe = steps_probe(graphs.session)
    if probe:
        out.line(probe.line())
    notes = list(prepared.notes)
    if shortened := shortened_line(cases, steps):
        out.note(shortened)
        notes.append(shortened)
    failed = [r for r in rows if not r.passed]
    slots = describe_slots(every_case, graphs.session.max_cache_len)
    out.emit_json(
        {
            "passed": not failed,
            "criterion": criterion_summary(),
            "steps_requested": steps,
            "graphs": len(graphs.graphs),
            "rows": [asdict(r) for r in rows],
            "repeats": repeats,
            "shortened": [s.as_json() for s in cases.shortened],
            "notes": notes,
            "memory": memory,
            "seconds": dict(clock.seconds),
            "reference": reference_json(graphs.session),
            "slots": slots,
            "coverage": asdict(coverage),
            "settings": engine,
        }
    )
    if failed:
        out.line(f"[red]verify failed[/red] for {len(failed)} of {len(rows)} batches; first: {_failure(failed[0])}")
        raise typer.Exit(1)
    replayed = len(graphs.graphs) - len(uncovered(cases, graphs.buckets, graphs.contexts))
    times = f" in each of {repeat} repeats" if repeat > 1 else ""
    once = len(rows) - sum(r["runs"] for r in repeats[1:])  # the first repeat's, and --tp's unsplit run
    out.line(
        f"[green]verified[/green]: {_count(once, 'run')}{times} replaying {replayed} of {_count(len(graphs.graphs), 'graph')} "
        f"({_count(len(graphs.buckets), 'batch bucket')} x {_count(len(graphs.contexts), 'context bucket')}) are as close "
        f"to the reference ({rows[0].reference if rows else 'float32'}) as eager execution ({CRITERION_LINE})."
    )
    ragged = ", left-padded batches among them" if any(c.pads for c in every_case) else ""
    out.line(f"replayed {slots}{ragged}; each graph judged after {coverage.soak} replays of it.")


REPEAT_SEED_STRIDE = 1000  # verify_graphs draws seeds seed..seed+cases: repeats never share one


def _repeat_summary(number: int, rows) -> dict:
    failed = [r for r in rows if not r.passed]
    return {
        "repeat": number,
        "runs": len(rows),
        "failed": len(failed),
        "worst_ratio": max((r.ratio for r in rows if r.ratio == r.ratio), default=0.0),  # NaN: a replay that raised
        # a failure in a later repeat is not in the table: say which case and why, here and in the JSON
        "first_failure": _failure(failed[0]) if failed else None,
    }


def _failure(row) -> str:
    """Which case failed and why, in the final line and in a repeat's."""
    return f"bucket {row.bucket}, batch {row.batch}: {row.detail}"


def _repeat_line(summary: dict) -> str:
    runs = summary["runs"]
    verdict = "pass" if not summary["failed"] else f"[red]{summary['failed']} FAILED[/red]"
    first = f"; first: {summary['first_failure']}" if summary.get("first_failure") else ""
    return (
        f"repeat {summary['repeat']}: {runs - summary['failed']} of {runs} runs pass ({verdict}); "
        f"worst replay error {summary['worst_ratio']:.2f} x eager's{first}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
