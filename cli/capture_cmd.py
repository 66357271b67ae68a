"""`cugraph-accel capture`: detect, capture every bucket, write the plan."""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from pathlib import Path
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
    WeightsOpt,
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
    weights: WeightsOpt = None,
) -> None:
    """Capture decode graphs for MODEL (default: the built-in `tiny` recipe) and write a plan (never over an
    existing plan without --force).

    Examples:

      cugraph-accel capture                                   # tiny built-in model, GPU if present

      cugraph-accel capture qwen2.5-0.5b --buckets 1,8,16,32

      cugraph-accel capture ./my-model --dtype bf16 --plan my.plan.yaml

      cugraph-accel capture qwen2.5-0.5b --force              # replace the plan already there

      cugraph-accel capture qwen2.5-0.5b --fuse --attn grouped --max-cache-len 4096

      cugraph-accel capture --json capture.json               # also the plan and timings as JSON

      cugraph-accel capture qwen2.5-0.5b --fuse --set pdl=off  # one engine setting changed (recorded in the plan)
    """
    arguments = dict(locals())
    from accelerate_graph.core.plan import check_plan_target

    from .common import settings_assignments
    from .tp import spread

    chosen = settings_assignments(assignments, allreduce)
    bucket_sizes, context_sizes = buckets_or_none(buckets), contexts_or_auto(contexts)  # bad lists first
    path = plan or DEFAULT_PLAN_PATH
    check_plan_target(path, force)  # before any work, and before --tp starts its ranks
    if json not in (None, STDOUT):
        _check_json_target(Path(json), path, force)

    if spread(capture, arguments, tp or 1, device):
        return
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
    kernels = inductor_cache_dir(path)
    if fuse and kernels.exists() and not kernels.is_dir():
        raise BadOptionError(
            f"--fuse keeps compiled kernels in {kernels}, which is a file.", "Move it, or choose another --plan."
        )
    request = CaptureRequest(
        model=DEFAULT_RECIPE if model is None else model,
        buckets=bucket_sizes,
        mode=mode,
        dtype=dtype,
        device=device,
        attn=attn,
        max_cache_len=max_cache_len,
        prompt_len=prompt_len,
        revision=revision,
        emulate=emulate,
        max_memory_mib=max_memory,
        contexts=context_sizes,
        fuse=fuse,
        inductor_cache=str(kernels) if fuse else None,
        tp=tp or 1,
        settings=engine,
        weights=weights or "model",
    )
    with _plan_lock(path, is_main_rank()):
        check_plan_target(path, force)  # again under the lock: a capture that finished while this one started
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
            check_plan_target(path, force)  # and at write time: a plan another tool wrote meanwhile
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


def _check_json_target(json_path: Path, plan_path: Path, force: bool) -> None:
    """The JSON results can go to `json_path`: not the plan's own path (the results would replace the
    plan just written), nor over a plan, recipe or model file without --force."""
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.common.errors import BadOptionError

    if os.path.abspath(json_path) == os.path.abspath(plan_path):
        raise BadOptionError(
            f"--json {json_path} is the plan's own path: the results would replace the plan.",
            "Choose another --json PATH.",
        )
    check_writable(json_path, "JSON results", force)


def _plan_lock(path: Path, holder: bool) -> contextlib.AbstractContextManager:
    """The plan's lock, held from the check before capture to the write; under --tp rank 0 alone holds it
    (it alone writes the plan)."""
    if not holder:
        return contextlib.nullcontext()
    from accelerate_graph.common.file_lock import exclusive_lock

    return exclusive_lock(path, f"plan {path}", "Wait for it to finish, or choose another --plan PATH.")
