"""`cugraph-accel capture`: detect, capture every bucket, write the plan."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from .errors import guarded
from .options import (
    DEFAULT_PLAN_PATH,
    AllReduceOpt,
    AttnOpt,
    BucketsOpt,
    CacheLenOpt,
    ContextsOpt,
    DeviceOpt,
    DtypeOpt,
    EmulateFlag,
    ForceFlag,
    FuseFlag,
    JsonOpt,
    ModelArg,
    PlanOpt,
    PromptLenOpt,
    RevisionOpt,
    SetOpt,
    TpOpt,
    buckets_or_none,
    contexts_or_auto,
)
from .output import STDOUT, Output

MaxMemoryOpt = Annotated[
    float | None,
    typer.Option(
        "--max-memory",
        min=0,
        help="Cap on graph memory in MiB: buckets whose graphs do not fit are dropped and listed.",
    ),
]
ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="auto (one graph if safe, else graph segments around eager "
        "islands, else eager), full, piecewise or eager.",
    ),
]


@guarded
def capture(
    model: ModelArg = None,
    buckets: BucketsOpt = None,
    mode: ModeOpt = "auto",
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    attn: AttnOpt = "sdpa",
    max_cache_len: CacheLenOpt = None,
    prompt_len: PromptLenOpt = None,
    revision: RevisionOpt = None,
    plan: PlanOpt = None,
    emulate: EmulateFlag = False,
    max_memory: MaxMemoryOpt = None,
    contexts: ContextsOpt = None,
    fuse: FuseFlag = False,
    json: JsonOpt = None,
    force: ForceFlag = False,
    tp: TpOpt = None,
    allreduce: AllReduceOpt = None,
    assignments: SetOpt = None,
) -> None:
    """Capture decode graphs for MODEL (default: the built-in `tiny` recipe) and write a plan.

    Examples:

      cugraph-accel capture                                   # tiny built-in model, GPU if present

      cugraph-accel capture qwen2.5-0.5b --buckets 1,8,16,32

      cugraph-accel capture ./my-model --dtype bf16 --plan my.plan.yaml

      cugraph-accel capture qwen2.5-0.5b --fuse --attn grouped --max-cache-len 4096

      cugraph-accel capture --json capture.json               # also the plan and timings as JSON

      cugraph-accel capture qwen2.5-0.5b --fuse --set pdl=off  # one engine setting changed (recorded in the plan)
    """
    arguments = dict(locals())
    from .common import settings_assignments
    from .tp import spread

    chosen = settings_assignments(assignments, allreduce)

    if spread(capture, arguments, tp or 1, device):
        return
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.common.errors import BadOptionError
    from accelerate_graph.core.plan import write_plan
    from accelerate_graph.distributed.rank import barrier, is_main_rank
    from accelerate_graph.fused.layers import inductor_cache_dir
    from accelerate_graph.models.recipes import DEFAULT_RECIPE
    from accelerate_graph.pipeline import CaptureRequest

    from .common import prepare_with_progress, report_memory, resolve_settings
    from .tables import capture_table

    out = Output(json)
    engine = resolve_settings(chosen)
    path = plan or DEFAULT_PLAN_PATH
    check_writable(path, "plan", force, replaces="plan")
    if json not in (None, STDOUT):
        check_writable(json, "JSON results", force)
    kernels = inductor_cache_dir(path)
    if fuse and kernels.exists() and not kernels.is_dir():
        raise BadOptionError(
            f"--fuse keeps compiled kernels in {kernels}, which is a file.", "Move it, or choose another --plan."
        )
    request = CaptureRequest(
        model=DEFAULT_RECIPE if model is None else model,
        buckets=buckets_or_none(buckets),
        mode=mode,
        dtype=dtype,
        device=device,
        attn=attn,
        max_cache_len=max_cache_len,
        prompt_len=prompt_len,
        revision=revision,
        emulate=emulate,
        max_memory_mib=max_memory,
        contexts=contexts_or_auto(contexts),
        fuse=fuse,
        inductor_cache=str(kernels) if fuse else None,
        tp=tp or 1,
        settings=engine,
    )
    prepared = prepare_with_progress(request, out)
    if prepared.graphs:
        out.show(capture_table(prepared.graphs.captures()))
    if prepared.compile_seconds:
        out.line(
            f"inductor compiled the step in {prepared.compile_seconds:.1f} s "
            f"({prepared.session.fused.layer_forward_kind()}; included in the capture times)"
        )
    memory = report_memory(prepared, out)
    barrier()  # under --tp: every rank captured and checked its graphs before rank 0 writes the plan
    if is_main_rank():
        write_plan(prepared.plan, path)
    out.line(f"plan written to {path}; next: cugraph-accel verify" + (f" --plan {path}" if plan else ""))
    out.emit_json(
        {
            "plan_path": str(path),
            "plan": asdict(prepared.plan),
            "settings": engine.as_dict(),
            "notes": prepared.notes,
            "memory": memory,
        }
    )
