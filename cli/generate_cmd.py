"""`cugraph-accel generate`: text from prompts, through the captured graphs (native decode loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import guarded
from .options import (
    AllReduceOpt,
    BucketsOpt,
    CacheLenOpt,
    DeviceOpt,
    DtypeOpt,
    EmulateFlag,
    ForceFlag,
    FuseFlag,
    JsonOpt,
    ModelArg,
    PlanOpt,
    RevisionOpt,
    SetOpt,
    TpOpt,
    WeightsOpt,
    buckets_or_none,
)
from .output import Output

PromptOpt = Annotated[list[str] | None, typer.Option("--prompt", help="A prompt (repeat for a batch).")]
PromptsOpt = Annotated[
    Path | None,
    typer.Option("--prompts", help='A JSONL file: a string, {"prompt": ...} or {"input_ids": [...]} a line.'),
]
InputIdsOpt = Annotated[
    list[str] | None, typer.Option("--input-ids", help="Token ids, e.g. 1,15,27 (repeat for a batch).")
]
NewTokensOpt = Annotated[int, typer.Option("--max-new-tokens", min=1, help="New tokens per prompt at most.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0: greedy (default); above 0: sample.")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="Sample among the k most likely tokens (0: all).")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="Sample among the top tokens holding this mass.")]
SeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Seed of the sampler (with --temperature above 0; greedy draws nothing).")
]


@guarded
def generate(
    model: ModelArg = None,
    prompt: PromptOpt = None,
    prompts: PromptsOpt = None,
    input_ids: InputIdsOpt = None,
    max_new_tokens: NewTokensOpt = 64,
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = None,
    buckets: BucketsOpt = None,
    max_cache_len: CacheLenOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    revision: RevisionOpt = None,
    fuse: FuseFlag = False,
    plan: PlanOpt = None,
    emulate: EmulateFlag = False,
    json: JsonOpt = None,
    force: ForceFlag = False,
    tp: TpOpt = None,
    allreduce: AllReduceOpt = None,
    assignments: SetOpt = None,
    weights: WeightsOpt = None,
) -> None:
    """Generate text for prompts: eager prefill, then one graph replay per new token.

    Examples:

      cugraph-accel generate ./my-model --prompt "Once upon a time" --max-new-tokens 64

      cugraph-accel generate Qwen/Qwen2.5-0.5B --prompts prompts.jsonl --json out.json

      cugraph-accel generate --plan cugraph-accel.plan.yaml --input-ids 1,15,27 --temperature 0.7 --seed 1

      cugraph-accel generate recipes/llama-3.1-8b.yaml --tp 2 --input-ids 1,15,27
    """
    arguments = dict(locals())
    from .common import settings_assignments
    from .tp import plan_device, plan_tp, spread

    chosen = settings_assignments(assignments, allreduce)

    arguments["tp"] = tp = plan_tp(tp, model, plan)
    if tp > 1 and temperature > 0 and seed is None:
        # every rank samples from the same logits: with one seed they draw the same tokens, or the
        # ranks' sequences (and their collectives' shapes, at the end of a row) would part
        import random

        arguments["seed"] = seed = random.SystemRandom().randrange(2**31)
    if tp > 1 and spread(
        generate, arguments, tp, device if model is not None and plan is None else plan_device(model, plan)
    ):
        return
    import time

    from .entry import STARTED_UNIX

    # start-up breakdown for --json: (stage, unix time) as each stage starts. "python up": our first
    # line ran; "command": the command line is parsed (torch not imported yet)
    stamps = [("python up", STARTED_UNIX)] if STARTED_UNIX is not None else []
    stamps.append(("command", time.time()))
    import torch  # noqa: F401 - imported here only to time it: the modules below import it

    stamps.append(("torch imported", time.time()))
    import transformers  # noqa: F401 - the same

    stamps.append(("transformers imported", time.time()))
    from accelerate_graph.generate.prompts import collect_prompts, encode_prompts, load_tokenizer
    from accelerate_graph.generate.run import GenerateJob, generation_report
    from accelerate_graph.generate.sampling import Sampling

    from .common import prepare_with_progress, request_for

    sampling = Sampling(temperature, top_k, top_p, seed).check()
    wanted = collect_prompts(prompt, prompts, input_ids)
    out = Output(json)
    out.check_json_writable(force)
    if seed is not None and sampling.greedy:
        out.note(f"--seed {seed} has no effect: decoding is greedy (--temperature 0), so no token is drawn at random.")
    overrides = dict(buckets=buckets_or_none(buckets), max_cache_len=max_cache_len, revision=revision, weights=weights)
    if model is not None and plan is None:
        overrides.update(dtype=dtype, device=device, fuse=fuse or None, emulate=emulate or None)
    request, source = request_for(model, plan, out, chosen, tp=tp, **overrides)
    request.lazy = True  # each graph captured on first use: the first token waits only for its own
    stamps.append(("imported", time.time()))
    prepared = prepare_with_progress(request, out, source, stamps)
    loaded = prepared.loaded
    tokenizer = load_tokenizer(loaded.reference if loaded.kind != "recipe" else None, loaded.revision)
    tokens = encode_prompts(wanted, tokenizer, loaded.reference)
    stamps.append(("tokenized", time.time()))
    job = GenerateJob(tokens, max_new_tokens, sampling)
    generation = _run(prepared.graphs, job, out)
    stamps.append(("first token", generation.first_token_unix))
    report = generation_report(generation, tokens, job)
    report["startup_unix"] = [[stage, at] for stage, at in stamps]  # where the time to first token went
    report["settings"] = request.settings.as_dict()
    if prepared.graphs is not None:  # what each graph's capture took (inside the stages above, or later)
        report["captures"] = [vars(c) for c in prepared.graphs.captures()]
    _summary(report, out, show_text=len(tokens.ids) > 1)
    out.emit_json(report)  # ids, text, first-token time, tokens/s, step percentiles


def _run(graphs, job, out: Output):
    """One prompt streams to the terminal; many draw a progress bar."""
    from accelerate_graph.generate.run import run_generate, special_ids
    from accelerate_graph.generate.stream import TextStream

    if len(job.tokens.ids) == 1:
        eos, _ = special_ids(graphs.session.model if graphs else None, job.tokens.tokenizer)
        stream = TextStream(job.tokens.tokenizer, eos)
        generation = run_generate(graphs, job, on_tokens=lambda row, new: _print(out, stream.push(new)))
        out.console.print()
        return generation
    with out.progress() as progress:
        task = progress.add_task("generating", total=len(job.tokens.ids))
        return run_generate(graphs, job, on_rows=lambda count: progress.advance(task, count))


def _print(out: Output, text: str) -> None:
    if text:
        out.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)


def _summary(report: dict, out: Output, show_text: bool) -> None:
    if show_text:
        for number, row in enumerate(report["outputs"], 1):
            text = row["text"] if row["text"] is not None else " ".join(map(str, row["token_ids"]))
            out.console.print(f"[bold]{number}[/bold] {text}", markup=True, highlight=False)
    steps = report["step_ms"]
    out.line(
        f"{report['new_tokens']} new tokens in {report['seconds']:.2f} s ({report['tokens_per_second']:.1f} tok/s); "
        f"first token {report['time_to_first_token_s'] * 1000:.0f} ms"
        + (f"; step p50 {steps['p50']:.2f} ms, p90 {steps['p90']:.2f} ms" if steps else "")
    )
