"""`cugraph-accel bench`: eager vs graph vs torch.compile vs HF generate, against the hardware floor."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from accelerate_graph.bench.options import CONTENDERS

from .errors import guarded
from .options import (
    DEFAULT_PLAN_PATH,
    AllReduceOpt,
    BucketsOpt,
    ContextsOpt,
    ForceFlag,
    JsonOpt,
    ModelArg,
    PlanOpt,
    SetOpt,
    TpOpt,
    WeightsOpt,
    buckets_or_none,
    contexts_or_auto,
)
from .output import STDOUT, Output

if TYPE_CHECKING:
    from accelerate_graph.bench.results import BenchReport
    from accelerate_graph.bench.run import BenchSettings
    from accelerate_graph.pipeline import CaptureRequest

    from .common import PlanSource

CompareOpt = Annotated[
    str,
    typer.Option(
        "--compare",
        help=f"Contenders, comma-separated, from {', '.join(CONTENDERS)}: "
        "fused is our graphs of the step compiled by inductor, with grouped-query decode "
        "attention (capture --fuse --attn grouped); "
        "compile is torch.compile(mode=reduce-overhead) of the same "
        "step; hf-generate is HF generate (static cache) next to our "
        "own decode loop.",
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="Cache lengths to sweep, e.g. 128,1024,4096 (default: the plan's or recipe's)."),
]
StepsOpt = Annotated[int, typer.Option("--steps", min=5, help="Timed decode steps per bucket and contender.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, help="Untimed steps before timing.")]
NewTokensOpt = Annotated[int, typer.Option("--new-tokens", min=1, help="New tokens per generate call (hf-generate).")]
CsvPathOpt = Annotated[Path | None, typer.Option("--csv", help="Also write the result rows to this CSV file.")]
PlotPathOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Also plot latency vs batch size to this PNG (needs matplotlib: the `plot` extra)."),
]
AllowCpuFlag = Annotated[bool, typer.Option("--allow-cpu", help="Time on the CPU anyway (meaningless for graphs).")]
AttnOverrideOpt = Annotated[
    str | None,
    typer.Option("--attn", help="sdpa, eager or grouped (default: MODEL's sdpa, or the plan's)."),
]
DeviceOpt = Annotated[
    str | None, typer.Option("--device", help="auto, cpu, cuda or cuda:N (default: MODEL's auto, or the plan's).")
]


def _device_text(model: str | None, plan: Path | None, device: str | None) -> str:
    from accelerate_graph.core.plan import read_plan

    if device is not None:
        return device
    if model is None or plan is not None:
        return read_plan(plan or DEFAULT_PLAN_PATH).device
    return "auto"


def _run_with_progress(
    request: CaptureRequest, settings: BenchSettings, out: Output, source: PlanSource | None
) -> BenchReport:
    from accelerate_graph.bench.run import BenchHooks, run_bench

    from .common import describe_model
    from .tables import region_tree

    with out.progress() as progress:
        stage = progress.add_task("starting", total=None)
        work = progress.add_task("benchmark", total=0)
        planned = [0]  # units of work announced so far: contexts announce theirs once prepared
        described: list[bool] = []

        def plan_more(units: int) -> None:
            planned[0] += units
            progress.update(work, total=planned[0])

        def prepared(prep) -> None:
            if not described:  # the same model and plan for every context: say them once
                if source is not None:
                    source.check(prep.loaded)
                describe_model(prep.loaded, out)
                plan = prep.plan
                out.show(region_tree(plan.model, plan.mode, plan.regions, plan.fixes))
                described.append(True)

        hooks = BenchHooks(
            stage=lambda text: progress.update(stage, description=text),
            planned=plan_more,
            advance=lambda: progress.advance(work),
            prepared=prepared,
        )
        return run_bench(request, settings, hooks)


def _write_files(report: BenchReport, out: Output, csv: Path | None, plot: Path | None) -> None:
    from accelerate_graph.bench.plot import write_plot
    from accelerate_graph.bench.report_files import write_csv

    out.emit_json(report.to_dict())
    for path, write in ((csv, write_csv), (plot, write_plot)):
        if path:
            write(report, path)
            out.line(f"written: {path}")


@guarded
def bench(
    model: ModelArg = None,
    plan: PlanOpt = None,
    buckets: BucketsOpt = None,
    compare: CompareOpt = "eager,graph",
    context: ContextOpt = None,
    steps: StepsOpt = 100,
    warmup: WarmupOpt = 10,
    new_tokens: NewTokensOpt = 128,
    device: DeviceOpt = None,
    json: JsonOpt = None,
    csv: CsvPathOpt = None,
    plot: PlotPathOpt = None,
    allow_cpu: AllowCpuFlag = False,
    attn: AttnOverrideOpt = None,
    context_buckets: ContextsOpt = None,
    force: ForceFlag = False,
    tp: TpOpt = None,
    allreduce: AllReduceOpt = None,
    assignments: SetOpt = None,
    weights: WeightsOpt = None,
) -> None:
    """Time the decode step per bucket and contender against the hardware floor (median, p10, p90).

    Examples:

      cugraph-accel bench                                     # reads ./cugraph-accel.plan.yaml

      cugraph-accel bench qwen2.5-0.5b --buckets 1,8,16,32 --json results.json

      cugraph-accel bench qwen2.5-0.5b --compare eager,graph,compile,hf-generate --plot bench.png

      cugraph-accel bench qwen2.5-0.5b --context 128,1024,4096 --csv sweep.csv

      cugraph-accel bench qwen2.5-0.5b --compare graph,fused,compile --attn grouped --context 1024,4096

      cugraph-accel bench --allow-cpu --steps 5 --json -      # JSON on stdout, on a CPU-only machine

      cugraph-accel bench --set smem_carveout=off             # the plan's graphs under one setting changed
    """
    arguments = dict(locals())
    from accelerate_graph.bench.options import parse_cache_lengths, parse_compare
    from accelerate_graph.bench.plot import require_matplotlib
    from accelerate_graph.bench.run import BenchSettings
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.common.devices import resolve_device
    from accelerate_graph.common.errors import CpuTimingRefused
    from accelerate_graph.distributed.rank import is_main_rank

    from .bench_tables import bench_tables
    from .common import request_for, settings_assignments
    from .tp import plan_tp, spread

    chosen = settings_assignments(assignments, allreduce)
    out = Output(json)
    settings = BenchSettings(
        compare=parse_compare(compare),
        contexts=parse_cache_lengths(context) if context is not None else None,
        steps=steps,
        warmup=warmup,
        new_tokens=new_tokens,
    )
    bucket_sizes = buckets_or_none(buckets)
    for path, what in ((None if json == STDOUT else json, "results"), (csv, "CSV"), (plot, "plot")):
        if path:
            check_writable(path, what, force)
    if plot:
        require_matplotlib()
    target = resolve_device(_device_text(model, plan, device))
    if target.type != "cuda" and not allow_cpu:
        raise CpuTimingRefused(
            "bench needs a CUDA GPU: CPU timings say nothing about CUDA graphs.",
            "Run it on a GPU machine, or pass --allow-cpu to time the emulation anyway.",
        )
    arguments["tp"] = tp = plan_tp(tp, model, plan)
    if spread(bench, arguments, tp, str(target)):
        return
    request, source = request_for(
        model,
        plan,
        out,
        chosen,
        buckets=bucket_sizes,
        device=str(target),
        attn=attn,
        contexts=contexts_or_auto(context_buckets),
        tp=tp,
        weights=weights,
    )
    report = _run_with_progress(request, settings, out, source)
    if is_main_rank():  # under --tp each rank timed its own share; rank 0's are the ones reported
        _write_files(report, out, csv, plot)
    for table in bench_tables(report):
        out.show(table)
    for info in report.contexts:
        for note in info.notes:
            out.note(f"cache {info.cache_len}: {note}")
    from accelerate_graph.core.memory import memory_line

    for info in report.contexts:
        if info.memory:
            out.line(f"cache {info.cache_len}: {memory_line(info.memory)}")
