"""`cugraph-accel bench`: decode-step latency, eager vs graph replay."""

from __future__ import annotations

import json as jsonlib
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from accelerate_graph.atomic_io import atomic_write_text, check_writable
from accelerate_graph.bench import bench_graphs
from accelerate_graph.devices import resolve_device
from accelerate_graph.errors import CpuTimingRefused
from accelerate_graph.plan import DEFAULT_PLAN_PATH, read_plan

from .common import prepare_with_progress, request_for
from .errors import guarded
from .options import BucketsOpt, ModelArg, PlanOpt, buckets_or_none
from .output import Output
from .tables import bench_table

StepsOpt = Annotated[int, typer.Option("--steps", min=5, help="Timed decode steps per bucket and contender.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, help="Untimed steps before timing.")]
JsonPathOpt = Annotated[Optional[Path], typer.Option("--json", help="Also write the results to this JSON file.")]
AllowCpuFlag = Annotated[bool, typer.Option("--allow-cpu", help="Time on the CPU anyway (meaningless for graphs).")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="auto, cpu, cuda or cuda:N (default: MODEL's "
                                                                   "auto, or the plan's).")]


def _device_text(model: str | None, plan: Path | None, device: str | None) -> str:
    if device is not None:
        return device
    if model is None or plan is not None:
        return read_plan(plan or DEFAULT_PLAN_PATH).device
    return "auto"


@guarded
def bench(
    model: ModelArg = None,
    plan: PlanOpt = None,
    buckets: BucketsOpt = None,
    steps: StepsOpt = 100,
    warmup: WarmupOpt = 10,
    device: DeviceOpt = None,
    json: JsonPathOpt = None,
    allow_cpu: AllowCpuFlag = False,
) -> None:
    """Time the decode step per bucket: eager vs graph replay (median and p90 of device-event timings).

    Examples:

      cugraph-accel bench                                     # reads ./cugraph-accel.plan.yaml

      cugraph-accel bench qwen2.5-0.5b --buckets 1,8,16,32 --json results.json
    """
    out = Output(False)
    if json:
        check_writable(json, "results")
    target = resolve_device(_device_text(model, plan, device))
    if target.type != "cuda" and not allow_cpu:
        raise CpuTimingRefused("bench needs a CUDA GPU: CPU timings say nothing about CUDA graphs.",
                               "Run it on a GPU machine, or pass --allow-cpu to time the emulation anyway.")
    request = request_for(model, plan, out, buckets=buckets_or_none(buckets), device=str(target))
    prepared = prepare_with_progress(request, out)
    if prepared.graphs is None:
        raise CpuTimingRefused("the plan runs eagerly: there is no graph to time.", "Capture with --mode auto.")
    with out.progress() as progress:
        task = progress.add_task("timing buckets", total=len(prepared.graphs.buckets))
        rows = bench_graphs(prepared.graphs, steps=steps, warmup=warmup, prompt_len=prepared.plan.prompt_len,
                            on_row=lambda row: progress.advance(task))
    out.show(bench_table(rows, prepared.plan.environment["gpu"] if target.type == "cuda" else "cpu (emulated)"))
    if json:
        report = {"plan": asdict(prepared.plan), "steps": steps, "warmup": warmup,
                  "rows": [{**asdict(r), "speedup": r.speedup, "graph_tokens_per_s": r.graph_tokens_per_s}
                           for r in rows]}
        atomic_write_text(json, jsonlib.dumps(report, indent=2, default=str))
        out.line(f"results written to {json}")
