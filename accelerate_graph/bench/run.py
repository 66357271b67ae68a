"""`bench`: eager vs graph replay vs torch.compile vs HF generate, against the hardware floor.

For each cache length (context) a fresh session is prepared; for each bucket the prompt is
prefilled once and every step contender times the same step from the same cache state, with a new
input token each step. The cache write position is rewound between steps outside the timed region,
so every step does the same work. Setup (capture, compilation, first calls) is timed apart.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from accelerate_graph.bench.compiled_step import COMPILE_MODE, forget_compiled, recompile_headroom
from accelerate_graph.bench.contenders import build_contender
from accelerate_graph.bench.environment import bench_environment, sm_clock_mhz
from accelerate_graph.bench.floor import Bandwidth, describe_floor, measure_bandwidth, step_bytes
from accelerate_graph.bench.generate import bench_hf_generate, bench_our_loop
from accelerate_graph.bench.generate_contenders import GENERATE_CONTENDERS, bench_generate_contenders
from accelerate_graph.bench.options import DEFAULT_COMPARE, STEP_CONTENDERS
from accelerate_graph.bench.results import STEP, BenchReport, BenchRow, ContextInfo, fill_speedups, under_floor_notes
from accelerate_graph.bench.timing import time_calls
from accelerate_graph.common.devices import resolve_device
from accelerate_graph.common.errors import CaptureError, CpuTimingRefused, VerificationError, is_out_of_memory
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import draw_inputs
from accelerate_graph.core.memory import Geometry, memory_record, peak_bytes
from accelerate_graph.core.plan import Plan
from accelerate_graph.fused.layers import warm_compile_workers
from accelerate_graph.pipeline import CaptureRequest, Hooks, Prepared, capture_fused, prepare


@dataclass
class BenchSettings:
    compare: tuple[str, ...] = DEFAULT_COMPARE
    contexts: tuple[int, ...] | None = None  # cache lengths; None: the plan's or recipe's
    steps: int = 100
    warmup: int = 10
    new_tokens: int = 128  # hf-generate and our loop
    seed: int = 0

    @property
    def step_contenders(self) -> list[str]:
        return [name for name in self.compare if name in STEP_CONTENDERS]


@dataclass
class BenchHooks:
    """Progress callbacks; the CLI draws them, library users may ignore them."""

    stage: Callable[[str], None] = lambda text: None
    planned: Callable[[int], None] = lambda units: None  # this many more units of work lie ahead
    advance: Callable[[], None] = lambda: None  # one unit (a contender at a bucket) is done
    prepared: Callable[[Prepared], None] = lambda prepared: None


def context_request(request: CaptureRequest, context: int | None) -> CaptureRequest:
    """The request for one cache length; a prompt from the plan is cut to half of a shorter cache."""
    if context is None:
        return request
    prompt = None if request.prompt_len is None else min(request.prompt_len, context // 2)
    return replace(request, max_cache_len=context, prompt_len=prompt)


def _time_contender(
    name: str,
    graphs: DecodeGraphs,
    bucket: int,
    tokens: torch.Tensor,
    prompt_len: int,
    settings: BenchSettings,
    floor: float,
) -> tuple[BenchRow, list[str]]:
    session = graphs.session
    positions = torch.full((bucket,), prompt_len, device=session.device)  # [b]

    def rewind() -> None:
        session.kv.rewind(prompt_len)

    with torch.no_grad():
        contender = build_contender(name, graphs, bucket, rewind)

        def before(_: int) -> None:
            rewind()
            contender.before()

        timed = time_calls(
            lambda i: contender.call(tokens[i], positions), before, settings.steps, settings.warmup, session.device
        )
    row = BenchRow.measured(
        STEP,
        session.max_cache_len,
        prompt_len,
        bucket,
        name,
        timed.latency,
        floor,
        setup_seconds=contender.setup_seconds,
        warmup_seconds=timed.warmup_seconds,
        memory_bytes=contender.memory_bytes,
    )
    return row, contender.notes


def _contenders_for(graphs: DecodeGraphs, bucket: int, settings: BenchSettings) -> tuple[list[str], list[str]]:
    """(names to time, notes): a bucket whose graph was not kept (--max-memory) has no graph row."""
    names = settings.step_contenders
    if "graph" in names and bucket not in graphs.buckets:
        return [n for n in names if n != "graph"], [f"batch {bucket} has no captured graph: no graph row"]
    return names, []


def bench_bucket(
    graphs: DecodeGraphs,
    bucket: int,
    prompt_len: int,
    settings: BenchSettings,
    floor: float,
    hooks: BenchHooks,
    only: tuple[str, ...],
) -> tuple[list[BenchRow], list[str]]:
    """The step contenders named in `only` on one bucket, from one prefilled cache state."""
    session = graphs.session
    count = settings.warmup + settings.steps
    prompt, tokens = draw_inputs(bucket, count, prompt_len, session.vocab_size, settings.seed + bucket)
    tokens = tokens.to(session.device)  # [S, b]
    session.kv.reset()
    session.prefill(prompt)
    names, notes = _contenders_for(graphs, bucket, settings)
    names = [name for name in names if name in only]
    rows = []
    for name in names:
        hooks.stage(
            f"cache {session.max_cache_len}, batch {bucket}: "
            + ("compiling, then timing torch.compile" if name == "compile" else f"timing {name}")
        )
        row, more = _time_contender(name, graphs, bucket, tokens, prompt_len, settings, floor)
        rows.append(row)
        notes += more
        hooks.advance()
    session.kv.reset()
    return rows, notes


def _require_graphs(prepared: Prepared, settings: BenchSettings) -> DecodeGraphs:
    if prepared.graphs is not None:
        return prepared.graphs
    needing = [name for name in settings.compare if name in ("graph", "hf-generate", "generate", "drop-in")]
    if needing:
        raise CpuTimingRefused(
            f"the plan runs eagerly: there is no graph to time ({', '.join(needing)}).",
            "Capture with --mode auto, or compare eager,compile only.",
        )
    return DecodeGraphs(prepared.session, {})  # eager and compile need only the session


def bench_context(
    prepared: Prepared,
    settings: BenchSettings,
    bandwidth: Bandwidth,
    hooks: BenchHooks,
    request: CaptureRequest | None = None,
) -> tuple[ContextInfo, list[BenchRow]]:
    """All contenders for all buckets of one prepared session (one cache length)."""
    graphs = _require_graphs(prepared, settings)
    plan, session = prepared.plan, prepared.session
    generate = "hf-generate" in settings.compare
    end_to_end = [name for name in GENERATE_CONTENDERS if name in settings.compare]
    hooks.planned(len(plan.buckets) * (len(settings.step_contenders) + int(generate) + len(end_to_end)))
    info = ContextInfo(plan.max_cache_len, plan.prompt_len, list(plan.buckets), plan.backend, list(prepared.notes))
    # the timed steps decode position prompt_len: they attend the prompt and themselves
    info.floors = [describe_floor(b, step_bytes(session, b, plan.prompt_len + 1), bandwidth) for b in plan.buckets]
    floors = {f["bucket"]: f["floor_ms"] for f in info.floors}
    rows: list[BenchRow] = []
    # torch.compile's cudagraph trees (ours to time, and HF generate's) clear the cuBLAS workspaces our
    # captured graphs point at: a replay of ours after them reads freed memory (an illegal address, seen
    # on the H200). So everything of ours runs first, then compile, then HF generate.
    for bucket in plan.buckets:
        more, notes = bench_bucket(
            graphs, bucket, plan.prompt_len, settings, floors[bucket], hooks, only=("eager", "graph")
        )
        rows += more
        info.notes += notes
        if generate:
            hooks.stage(f"cache {plan.max_cache_len}, batch {bucket}: our decode loop")
            rows.append(
                bench_our_loop(graphs, bucket, plan.prompt_len, settings.new_tokens, floors[bucket], settings.seed)
            )
    rows += bench_generate_contenders(prepared, graphs, settings, floors, hooks, bool(request and request.emulate))
    if "fused" in settings.step_contenders:
        rows += _bench_fused(prepared, request or CaptureRequest(), settings, floors, hooks, info)
    if "compile" in settings.step_contenders:
        with recompile_headroom(len(plan.buckets) + 8):
            rows += _bench_buckets(graphs, plan, settings, floors, hooks, info, only=("compile",))
        forget_compiled()
    info.eager_fallbacks = graphs.eager_fallbacks  # counted before torch.compile / HF generate run
    info.memory = _memory(prepared, rows, generate=False)  # before HF generate: it allocates its own cache
    for bucket in plan.buckets if generate else ():
        hooks.stage(f"cache {plan.max_cache_len}, batch {bucket}: HF generate (its first call compiles)")
        rows.append(
            bench_hf_generate(
                prepared.session, bucket, plan.prompt_len, settings.new_tokens, floors[bucket], settings.seed
            )
        )
        hooks.advance()
    if generate:
        info.memory = _memory(prepared, rows, generate=True)
    info.notes += under_floor_notes(rows)
    return info, rows


def _memory(prepared: Prepared, rows: list[BenchRow], generate: bool) -> dict:
    """The peak so far beside the bound: one session, one cache, every contender on it; the fused graphs
    and compile's cudagraph trees as measured, and HF generate's own static cache when it ran."""
    session = prepared.session
    fused = sum(r.memory_bytes or 0 for r in rows if r.kind == STEP and r.contender == "fused")
    extra = {"compile's graphs": sum(r.memory_bytes or 0 for r in rows if r.kind == STEP and r.contender == "compile")}
    geometry = Geometry.of(session.model.config)
    if generate and geometry is not None:  # generate(cache_implementation="static") builds a cache of its own
        extra["HF generate's cache"] = geometry.kv_bytes(
            max(prepared.plan.buckets), session.max_cache_len, session.model.dtype
        )
    bound = prepared.memory_bound(3, extra, graph_bytes=fused)
    return memory_record(peak_bytes(session.device), bound)


def _bench_fused(
    prepared: Prepared,
    request: CaptureRequest,
    settings: BenchSettings,
    floors: dict[int, float],
    hooks: BenchHooks,
    info: ContextInfo,
) -> list[BenchRow]:
    """Capture the inductor-compiled step on the same session, then time it like `graph`."""
    plan = prepared.plan
    hooks.stage(f"cache {plan.max_cache_len}: compiling the step with inductor, capturing it (fused)")
    try:
        fused = capture_fused(prepared, request)
    except (CaptureError, VerificationError) as err:
        info.notes.append(f"no fused row: {err.message}")
        return []
    except Exception as err:  # noqa: BLE001 - a compiler failure must not cost the other contenders' rows
        if is_out_of_memory(err):
            raise
        info.notes.append(f"no fused row: inductor failed: {' '.join(str(err).split())[:300]}")
        return []
    info.notes.append(
        f"fused: inductor compiled the decoder layers in {prepared.session.fused.compile_seconds:.1f} s "
        f"({prepared.session.fused.graphs} graph(s), {prepared.session.fused.recompiles} recompilation(s)); "
        "the fused setup column includes it"
    )
    return _bench_buckets(fused, plan, settings, floors, hooks, info, only=("fused",))


def _bench_buckets(
    graphs: DecodeGraphs,
    plan: Plan,
    settings: BenchSettings,
    floors: dict[int, float],
    hooks: BenchHooks,
    info: ContextInfo,
    only: tuple[str, ...],
) -> list[BenchRow]:
    """The contenders in `only` on every bucket of the plan; their notes go to the context's."""
    rows = []
    for bucket in plan.buckets:
        more, notes = bench_bucket(graphs, bucket, plan.prompt_len, settings, floors[bucket], hooks, only=only)
        rows += more
        info.notes += notes
    return rows


def _one_context(
    request: CaptureRequest, context: int | None, settings: BenchSettings, bandwidth: Bandwidth, hooks: BenchHooks
) -> tuple[ContextInfo, list[BenchRow], dict]:
    """Prepare, bench, and let everything of this context go when it returns."""
    prepared = prepare(context_request(request, context), Hooks(stage=hooks.stage))
    hooks.prepared(prepared)
    info, rows = bench_context(prepared, settings, bandwidth, hooks, request)
    plan = prepared.plan
    described = {
        "model": plan.model,
        "model_type": plan.model_type,
        "random_weights": plan.random_weights,
        "dtype": plan.dtype,
        "attn": plan.attn,
        "buckets": plan.buckets,
    }
    return info, rows, described


def release(device: torch.device) -> None:
    """Free one context's model, cache, graphs and compiled code before the next is built."""
    forget_compiled()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_bench(request: CaptureRequest, settings: BenchSettings, hooks: BenchHooks | None = None) -> BenchReport:
    hooks = hooks or BenchHooks()
    device = resolve_device(request.device)
    environment = bench_environment(device)
    if "fused" in settings.step_contenders:
        warm_compile_workers(device, request.inductor_cache)
    hooks.stage("measuring memory bandwidth (the floor's denominator)")
    report = BenchReport(environment, measure_bandwidth(device), {})
    for context in settings.contexts or (None,):
        info, rows, described = _one_context(request, context, settings, report.bandwidth, hooks)
        report.contexts.append(info)
        report.rows += rows
        release(device)
    fill_speedups(report.rows)
    environment["sm_clock_mhz_end"] = sm_clock_mhz(device)
    report.settings = {
        **described,
        "compare": list(settings.compare),
        "steps": settings.steps,
        "warmup": settings.warmup,
        "new_tokens": settings.new_tokens,
        "seed": settings.seed,
        "compile_mode": COMPILE_MODE,
        "contexts": [c.cache_len for c in report.contexts],
    }
    return report
