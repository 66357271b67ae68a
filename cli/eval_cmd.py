"""`cugraph-accel eval`: perplexity, KL and top-token agreement of eager, graph and fused decoding
against the float32 reference of the same weights, over a text, teacher-forced; a gate against eager."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import guarded
from .options import (
    BucketsOpt,
    CacheLenOpt,
    DeviceOpt,
    DtypeOpt,
    EmulateFlag,
    ForceFlag,
    JsonOpt,
    ModelArg,
    PlanOpt,
    SetOpt,
    buckets_or_none,
)
from .output import Output

TextOpt = Annotated[
    Path | None, typer.Option("--text", metavar="FILE", help="UTF-8 text to score, encoded by the model's tokenizer.")
]
TokensOpt = Annotated[
    Path | None,
    typer.Option(
        "--tokens",
        metavar="FILE",
        help="Token ids to score instead of --text (a JSON list or whitespace-separated integers), for a "
        "model without a tokenizer.",
    ),
]
WindowsOpt = Annotated[
    int | None,
    typer.Option("--windows", min=1, help="Windows scored (default: every whole one the text holds, up to 64)."),
]
WindowLenOpt = Annotated[
    int | None,
    typer.Option(
        "--window-len",
        min=1,
        help="Tokens per window: one cache row from its first token on (default: the cache length, up to 512).",
    ),
]
FuseArmFlag = Annotated[
    bool, typer.Option("--fuse", help="Also score the fused step (inductor with our kernels) as its own arm.")
]
MarginOpt = Annotated[
    float,
    typer.Option(
        "--margin",
        min=0.0,
        help="Allowed excess over eager's mean KL and NLL error, as a fraction of eager's (default 0: any "
        "measurable excess fails).",
    ),
]
CostWeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        metavar="KIND",
        help="fp8 or fp8-block: also measure eager with the decoder's Linear layers in FP8, against the same "
        "float32 reference of the model's own weights, in a table of what FP8 costs (measured, not judged; "
        "docs/FP8.md). Needs --dtype bf16 or fp16.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the bootstrap resamples.")]


@guarded
def eval_command(
    model: ModelArg = None,
    text: TextOpt = None,
    tokens: TokensOpt = None,
    plan: PlanOpt = None,
    windows: WindowsOpt = None,
    window_len: WindowLenOpt = None,
    fuse: FuseArmFlag = False,
    margin: MarginOpt = 0.0,
    seed: SeedOpt = 0,
    buckets: BucketsOpt = None,
    dtype: DtypeOpt = None,
    device: DeviceOpt = None,
    max_cache_len: CacheLenOpt = None,
    emulate: EmulateFlag = False,
    json: JsonOpt = None,
    force: ForceFlag = False,
    assignments: SetOpt = None,
    weights: CostWeightsOpt = None,
) -> None:
    """Score a text through eager, graph (and with --fuse, fused) decoding against the float32 reference.

    Per arm: perplexity, KL from the reference (mean, median, p99, max), top-token agreement, 95% intervals.

    Exit code 3 when an arm's KL or NLL error is measurably worse than eager's (docs/EVAL.md).

    Examples:

      cugraph-accel eval meta-llama/Llama-3.1-8B --text wiki.test.raw

      cugraph-accel eval --plan my.plan.yaml --text book.txt --fuse --json eval.json

      cugraph-accel eval ./my-model --tokens ids.json --windows 16 --window-len 256
    """
    from accelerate_graph.common.errors import BadOptionError
    from accelerate_graph.eval import windows as windowing

    from .common import prepare_with_progress, request_for, settings_assignments

    chosen = settings_assignments(assignments)
    if weights is not None:
        from accelerate_graph.quant.quantize import check_weights

        check_weights(weights)
    if (text is None) == (tokens is None):
        raise BadOptionError("give exactly one of --text FILE and --tokens FILE.", "Use --text for plain text.")
    # the text's own faults are found before any model loads
    words = windowing.read_text(text) if text is not None else None
    ids = windowing.read_token_ids(tokens) if tokens is not None else None
    out = Output(json)
    out.check_json_writable(force)
    request, source = request_for(
        model,
        plan,
        out,
        chosen,
        buckets=buckets_or_none(buckets),
        dtype=dtype,
        device=device,
        max_cache_len=max_cache_len,
        emulate=emulate or None,
    )
    if weights not in (None, "model") and request.weights != "model":
        raise BadOptionError(
            f"--weights {weights} adds an FP8 arm beside the model's own weights, but the plan already runs "
            f"--weights {request.weights}.",
            "Pass MODEL (or a plan captured without --weights) to measure what FP8 costs.",
        )
    if request.tp > 1:
        raise BadOptionError(
            f"the plan runs over {request.tp} ranks (--tp); eval scores one device.",
            "Capture a plan without --tp for eval, or pass MODEL.",
        )
    if ids is None:  # the tokenizer sits beside the weights: a text it cannot encode is refused before they load
        from accelerate_graph.generate.prompts import load_tokenizer

        ids = windowing.encode(words, load_tokenizer(request.model, request.revision), request.model)
    prepared = prepare_with_progress(request, out, source)
    session = prepared.session
    if tokens is not None:
        windowing.check_vocabulary(ids, session.vocab_size, tokens)
    if prepared.plan.dtype == "float32":
        out.note(
            "the model runs in float32, so it is its own reference and eager's KL is 0: an arm passes only "
            "within the gate's noise floor. Pass --dtype bfloat16 to judge the arms against bf16 decoding."
        )
    length = window_len or windowing.default_window_len(session.max_cache_len)
    cut = windowing.cut_windows(ids, length, windows, session.max_cache_len)
    if prepared.graphs is None:
        out.note("the plan runs the decode step eagerly: only eager is scored, and nothing is judged.")
    arms = _arms(prepared)
    cost = _fp8_arm(prepared, weights, out) if weights not in (None, "model") else None
    evaluation = _run(session, cut, arms + ([cost] if cost else []), margin, seed, out)
    if fuse and prepared.graphs is not None and not prepared.plan.fuse:
        from accelerate_graph.eval.runs import eager_arm, graph_arm
        from accelerate_graph.pipeline import capture_fused

        # a pass of its own, after the plan's graphs are done: capturing the fused step on the session
        # leaves those graphs unfit to replay (their NaN on the GPU), and eager repeats bit for bit
        out.line("capturing the fused step")
        fused = graph_arm("fused", capture_fused(prepared, request))
        second = _run(session, cut, [eager_arm(), fused], margin, seed, out)
        evaluation.arms += [arm for arm in second.arms if arm.name == "fused"]
    _report(evaluation, out, request.settings.as_dict(), prepared, cost.name if cost else None)


def _fp8_arm(prepared, weights: str, out: Output):
    """Eager with the decoder's Linear layers in FP8 (`weights`), swapped in for its steps only: the other
    arms and the float32 reference keep the model's own weights."""
    from accelerate_graph.eval.runs import swapped_arm
    from accelerate_graph.quant.quantize import check_fp8_dtype, quantize_model

    check_fp8_dtype(prepared.loaded.dtype, f"--weights {weights}")
    quantization = quantize_model(prepared.session.model, weights, keep_originals=True)
    quantization.restore()
    out.note(f"arm {weights}: {quantization.describe()}; measured against the same float32 reference, not judged.")
    return swapped_arm(weights, quantization.installed)


def _cost_table(evaluation, out: Output, dtype: str, cost: str) -> dict:
    """What `cost` weights cost against the model's own in eager: one table, and its JSON."""
    from rich.table import Table

    from accelerate_graph.eval.report import COST_COLUMNS, cost_rows

    rows = cost_rows(evaluation, "eager", f"{dtype} (model)", (cost,))
    table = Table(title=f"what {cost} weights cost: eager decoding against the float32 reference of the {dtype} model")
    for number, name in enumerate(COST_COLUMNS):
        table.add_column(name, justify="left" if number == 0 else "right")
    for row in rows:
        table.add_row(*row)
    out.show(table)
    return {"baseline": "eager", "arm": cost, "columns": list(COST_COLUMNS), "rows": [list(row) for row in rows]}


def _arms(prepared) -> list:
    """Eager (the baseline) and the plan's graphs (fused ones when the plan is fused)."""
    from accelerate_graph.eval.runs import eager_arm, graph_arm

    arms = [eager_arm()]
    if prepared.graphs is not None:
        arms.append(graph_arm("fused" if prepared.plan.fuse else "graph", prepared.graphs))
    return arms


def _run(session, cut, arms, margin: float, seed: int, out: Output):
    from accelerate_graph.eval.evaluation import evaluate

    with out.progress() as progress:
        task = progress.add_task(f"scoring {len(arms)} arms and the float32 reference", total=cut.count)
        return evaluate(
            session,
            cut,
            arms,
            margin=margin,
            seed=seed,
            on_batch=lambda done: progress.update(task, completed=done),
        )


def _report(evaluation, out: Output, engine: dict, prepared, cost: str | None = None) -> None:
    from rich.table import Table

    from accelerate_graph.eval.report import COLUMNS, table_rows, title, verdict_lines
    from accelerate_graph.eval.verdict import GATE_FAILED_EXIT
    from accelerate_graph.verify.reference import reference_json, steps_probe

    table = Table(title=title(evaluation))
    for number, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if number == 0 else "right")
    for row in table_rows(evaluation):
        table.add_row(*row)
    out.show(table)
    for line in verdict_lines(evaluation):
        out.line(line)
    probe = steps_probe(prepared.session)
    if probe:
        out.line(probe.line())
    cost_json = _cost_table(evaluation, out, prepared.plan.dtype, cost) if cost else None
    out.emit_json(
        {
            **evaluation.as_json(),
            **({"cost": cost_json} if cost_json else {}),
            "model": prepared.loaded.reference,
            "dtype": prepared.plan.dtype,
            "notes": prepared.notes,
            "settings": engine,
            "reference": reference_json(prepared.session),
        }
    )
    if not evaluation.passed:
        names = ", ".join(arm.name for arm in evaluation.failed)
        out.line(f"[red]eval failed[/red]: {names} measurably worse than eager against the float32 reference.")
        raise typer.Exit(GATE_FAILED_EXIT)
    judged = ", ".join(arm.name for arm in evaluation.judged)
    if judged:
        out.line(f"[green]passed[/green]: {judged} no worse than eager against the float32 reference.")
