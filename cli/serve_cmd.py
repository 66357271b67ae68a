"""`cugraph-accel serve`: an OpenAI-compatible HTTP server with continuous batching over the captured graphs."""

from __future__ import annotations

from typing import Annotated

import typer

from .errors import guarded
from .options import (
    BucketsOpt,
    CacheLenOpt,
    DeviceOpt,
    DtypeOpt,
    EmulateFlag,
    FuseFlag,
    ModelArg,
    PlanOpt,
    RevisionOpt,
    SetOpt,
    WeightsOpt,
    buckets_or_none,
)
from .output import Output

HostOpt = Annotated[str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")]
PortOpt = Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: a free one).")]
MaxBatchOpt = Annotated[
    int | None,
    typer.Option(
        "--max-batch",
        min=1,
        help="Requests decoded together at most (default: the largest bucket). Without --buckets or --plan, the "
        "buckets are the powers of two up to it.",
    ),
]
QueueOpt = Annotated[
    int, typer.Option("--queue", min=1, help="Requests waiting for a row at most; beyond it a request gets 429.")
]
DrainOpt = Annotated[
    float,
    typer.Option("--drain-s", min=0, help="On SIGTERM: seconds the running requests get to finish before the exit."),
]
ChunkOpt = Annotated[
    int,
    typer.Option(
        "--prefill-chunk",
        min=1,
        help="Prompt tokens one prefill forward runs at most (rows x the longest prompt): a decode step waits for "
        "one at most.",
    ),
]


@guarded
def serve(
    model: ModelArg = None,
    plan: PlanOpt = None,
    fuse: FuseFlag = False,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    max_batch: MaxBatchOpt = None,
    queue: QueueOpt = 256,
    drain_s: DrainOpt = 30.0,
    prefill_chunk: ChunkOpt = 2048,
    buckets: BucketsOpt = None,
    max_cache_len: CacheLenOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    revision: RevisionOpt = None,
    emulate: EmulateFlag = False,
    weights: WeightsOpt = None,
    assignments: SetOpt = None,
) -> None:
    """Serve MODEL (or a plan's model) over HTTP with OpenAI's API: /v1/completions, /v1/chat/completions,
    /v1/models, /health and /metrics. Needs the `serve` extra (pip install 'cugraph-accel[serve]').

    Examples:

      cugraph-accel serve recipes/llama-3.1-8b.yaml --fuse --max-batch 64

      cugraph-accel serve --plan cugraph-accel.plan.yaml --port 8080

      curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "Once upon a time", "max_tokens": 32}'
    """
    from accelerate_graph.serve.server import require_server_packages

    from .common import settings_assignments

    require_server_packages()  # before any model loads
    chosen = settings_assignments(assignments)
    bucket_sizes = buckets_or_none(buckets)
    if bucket_sizes is None and max_batch is not None and plan is None:
        from accelerate_graph.core.buckets import powers_of_two_to

        bucket_sizes = powers_of_two_to(max_batch)

    from accelerate_graph.common.devices import device_label
    from accelerate_graph.common.errors import BadOptionError
    from accelerate_graph.models.recipes import RecipeDefaults
    from accelerate_graph.serve.assemble import assemble
    from accelerate_graph.serve.server import serve as run_server

    from .common import prepare_with_progress, request_for

    out = Output(None)
    overrides = dict(buckets=bucket_sizes, max_cache_len=max_cache_len, revision=revision, weights=weights)
    if model is not None and plan is None:
        overrides.update(dtype=dtype, device=device, fuse=fuse or None, emulate=emulate or None)
    request, source = request_for(model, plan, out, chosen, **overrides)
    request.per_row = True  # each row at its own position: requests join and leave at any step
    if request.prompt_len is None and request.max_cache_len is not None:
        # the capture's check prompt: half a short cache (the note naming --prompt-len would not apply here)
        request.prompt_len = max(1, min(RecipeDefaults().prompt_len, request.max_cache_len // 2))
    if max_batch is not None and request.buckets and max_batch > max(request.buckets):
        raise BadOptionError(
            f"{{max_batch={max_batch}}} is more than the largest bucket ({max(request.buckets)}).",
            "Lower {max_batch}, or give larger {buckets}.",
        )
    from accelerate_graph.serve.engine import SlotEngine

    prepared = prepare_with_progress(request, out, source)
    engine = SlotEngine(prepared, chunk=prefill_chunk, settings=request.settings)
    if max_batch is not None and max_batch > engine.max_rows:
        raise BadOptionError(
            f"{{max_batch={max_batch}}} is more than the plan's largest bucket ({engine.max_rows}).",
            "Lower {max_batch}, or capture with larger {buckets}.",
        )
    service = assemble(prepared, engine, max_batch=max_batch, queue_limit=queue)
    where = f"{source.path}" if source is not None else "none (captured now)"

    def listening(bound: int) -> None:
        out.line(f"serving {service.served.name} on http://{host}:{bound}/v1 (OpenAI API; /health, /metrics)")
        out.line(
            f"plan {where}; {'fused' if prepared.plan.fuse else prepared.plan.mode} graphs on "
            f"{device_label(prepared.session.device)}; {service.scheduler.max_rows} rows of {engine.max_len} "
            f"tokens; queue {queue}; SIGTERM drains for {drain_s:g} s"
        )
        if engine.prefill_graphs is not None:
            graphs = engine.prefill_graphs
            rows, width = max(r for r, _ in graphs.shapes), max(w for _, w in graphs.shapes)
            out.line(
                f"prompts prefilled by {len(graphs.shapes)} graphs of up to {rows} rows x {width} tokens "
                f"({graphs.memory_bytes / 2**20:,.0f} MiB)"
            )

    run_server(service.app, service.scheduler, host, port, drain_s, on_listening=listening)
    out.line("server stopped")
