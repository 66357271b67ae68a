"""`bench`: the contenders of bench/contenders/ (eager, graph replay, fused, torch.compile, HF generate),
against the hardware floor.

For each cache length a fresh session is prepared; the contenders run tier by tier. For each batch the
prompt is prefilled once and every step contender of a tier times the same step from the same cache
state, with a new input token each step. The cache write position is rewound between steps outside the
timed region, so every step does the same work. Setup (capture, compilation, first calls) is timed apart.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace

import torch

from accelerate_graph import settings as engine_settings
from accelerate_graph.bench.compiled_step import COMPILE_MODE, forget_compiled
from accelerate_graph.bench.contenders import Contender, chosen_contenders
from accelerate_graph.bench.contenders.base import ContextRun, Tier
from accelerate_graph.bench.environment import bench_environment, note_table_coverage, sm_clock_mhz
from accelerate_graph.bench.floor import Bandwidth, describe_floor, measure_bandwidth, step_bytes
from accelerate_graph.bench.options import DEFAULT_COMPARE
from accelerate_graph.bench.results import STEP, BenchReport, BenchRow, ContextInfo, fill_speedups, under_floor_notes
from accelerate_graph.bench.timing import time_calls
from accelerate_graph.common.devices import resolve_device
from accelerate_graph.common.errors import CpuTimingRefused
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import draw_inputs
from accelerate_graph.core.memory import Geometry, memory_record, peak_bytes
from accelerate_graph.pipeline import CaptureRequest, Hooks, Prepared, prepare
from accelerate_graph.quant.quantize import fp8_scheme


@dataclass
class BenchSettings:
    compare: tuple[str, ...] = DEFAULT_COMPARE
    contexts: tuple[int, ...] | None = None  # cache lengths; None: the plan's or recipe's
    steps: int = 100
    warmup: int = 10
    new_tokens: int = 128  # hf-generate and our loop
    seed: int = 0

    @property
    def contenders(self) -> list[Contender]:
        return chosen_contenders(self.compare)


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


def fused_alone(request: CaptureRequest, settings: BenchSettings) -> CaptureRequest:
    """With fused the only contender, the plan is what `capture --fuse` makes: no plain graphs captured
    first (less time and memory). Timing does not depend on it: every capture of a process shares one
    stream (core/backends/cuda.py capture_stream)."""
    if [c.name for c in settings.contenders] == ["fused"]:
        return replace(request, fuse=True)
    return request


def _time_step(
    contender: Contender, graphs: DecodeGraphs, batch: int, tokens: torch.Tensor, run: ContextRun
) -> tuple[BenchRow, list[str]]:
    """Set up one step contender for `batch` and time it, each step from the prompt's end."""
    session, settings = graphs.session, run.settings
    prompt_len = run.prepared.plan.prompt_len
    positions = torch.full((batch,), prompt_len, device=session.device)  # [b]

    def rewind() -> None:
        session.kv.rewind(prompt_len)

    with torch.no_grad():
        step = contender.step(graphs, batch, rewind)

        def before(_: int) -> None:
            rewind()
            step.before()

        timed = time_calls(
            lambda i: step.call(tokens[i], positions), before, settings.steps, settings.warmup, session.device
        )
    row = BenchRow.measured(
        STEP,
        session.max_cache_len,
        prompt_len,
        batch,
        contender.name,
        timed.latency,
        run.floors[batch],
        setup_seconds=step.setup_seconds,
        warmup_seconds=timed.warmup_seconds,
        memory_bytes=step.memory_bytes,
    )
    return row, step.notes


def bench_batch(run: ContextRun, batch: int, steps: list[tuple[Contender, DecodeGraphs]]) -> list[BenchRow]:
    """The step contenders in `steps` (each with the graphs it runs) on one batch, from one prefilled
    cache state; a contender that replays graphs has no row where the batch's graph was not kept."""
    session, settings = run.session, run.settings
    prompt_len = run.prepared.plan.prompt_len
    count = settings.warmup + settings.steps
    prompt, tokens = draw_inputs(batch, count, prompt_len, session.vocab_size, settings.seed + batch)
    tokens = tokens.to(session.device)  # [S, b]
    session.kv.reset()
    session.prefill(prompt)
    rows = []
    for contender, graphs in steps:
        if contender.replays_graphs and batch not in graphs.buckets:
            run.info.notes.append(f"batch {batch} has no captured graph: no {contender.name} row")
            continue
        run.hooks.stage(f"cache {session.max_cache_len}, batch {batch}: {contender.progress_text}")
        row, notes = _time_step(contender, graphs, batch, tokens, run)
        rows.append(row)
        run.info.notes += notes
        run.hooks.advance()
    session.kv.reset()
    return rows


def _require_graphs(prepared: Prepared, chosen: list[Contender]) -> DecodeGraphs:
    if prepared.graphs is not None:
        return prepared.graphs
    needing = list(dict.fromkeys(c.chosen_as for c in chosen if c.needs_graphs))
    if needing:
        raise CpuTimingRefused(
            f"the plan runs eagerly: there is no graph to time ({', '.join(needing)}).",
            "Capture with {mode='auto'}, or compare eager,compile only.",
        )
    return DecodeGraphs(prepared.session, {})  # eager and compile need only the session


def _run_tier(run: ContextRun, tier: list[Contender]) -> list[BenchRow]:
    """One tier's contenders batch by batch: its step contenders from one prefill, then the rest."""
    rows: list[BenchRow] = []
    with ExitStack() as scopes:
        graphs = {c.name: scopes.enter_context(c.scope(run)) for c in tier}
        ready = [c for c in tier if graphs[c.name] is not None]  # a scope that yields None has no rows
        for batch in run.prepared.plan.buckets:
            steps = [(c, graphs[c.name]) for c in ready if c.step is not None]
            rows += bench_batch(run, batch, steps) if steps else []
            for contender in (c for c in ready if c.calls is not None):
                run.hooks.stage(f"cache {run.session.max_cache_len}, batch {batch}: {contender.progress_text}")
                rows.append(contender.calls(run, graphs[contender.name], batch))
                run.hooks.advance()
    return rows


def bench_context(
    prepared: Prepared,
    settings: BenchSettings,
    bandwidth: Bandwidth,
    hooks: BenchHooks,
    request: CaptureRequest | None = None,
) -> tuple[ContextInfo, list[BenchRow]]:
    """All contenders for all batches of one prepared session (one cache length), tier by tier
    (contenders/base.py says why the order matters)."""
    chosen = settings.contenders
    graphs = _require_graphs(prepared, chosen)
    plan, session = prepared.plan, prepared.session
    hooks.planned(len(plan.buckets) * len(chosen))
    info = ContextInfo(plan.max_cache_len, plan.prompt_len, list(plan.buckets), plan.backend, list(prepared.notes))
    # the timed steps decode position prompt_len: they attend the prompt and themselves
    info.floors = [describe_floor(b, step_bytes(session, b, plan.prompt_len + 1), bandwidth) for b in plan.buckets]
    floors = {f["bucket"]: f["floor_ms"] for f in info.floors}
    run = ContextRun(prepared, graphs, settings, floors, hooks, info, request or CaptureRequest())
    rows: list[BenchRow] = []
    for tier in sorted({c.tier for c in chosen}):
        rows += _run_tier(run, [c for c in chosen if c.tier == tier])
    info.eager_fallbacks = graphs.eager_fallbacks
    # the peak beside its bound; HF generate (last) allocates a cache of its own
    info.memory = _memory(prepared, rows, generate=any(c.tier == Tier.HF_GENERATE for c in chosen))
    info.notes += under_floor_notes(rows)
    return info, rows


def _memory(prepared: Prepared, rows: list[BenchRow], generate: bool) -> dict:
    """The peak so far beside the bound: one session, one cache, every contender on it; the fused graphs
    and compile's cudagraph trees as measured, and HF generate's own static cache when it ran."""
    session = prepared.session
    # fused graphs captured apart from the plan's; a plan prepared with --fuse counts its own
    fused = (
        0 if prepared.plan.fuse else sum(r.memory_bytes or 0 for r in rows if r.kind == STEP and r.contender == "fused")
    )
    extra = {"compile's graphs": sum(r.memory_bytes or 0 for r in rows if r.kind == STEP and r.contender == "compile")}
    geometry = Geometry.of(session.model.config)
    if generate and geometry is not None:  # generate(cache_implementation="static") builds a cache of its own
        extra["HF generate's cache"] = geometry.kv_bytes(
            max(prepared.plan.buckets), session.max_cache_len, session.model.dtype
        )
    bound = prepared.memory_bound(3, extra, graph_bytes=fused)
    return memory_record(peak_bytes(session.device), bound)


def _one_context(
    request: CaptureRequest, context: int | None, settings: BenchSettings, bandwidth: Bandwidth, hooks: BenchHooks
) -> tuple[ContextInfo, list[BenchRow], dict]:
    """Prepare, bench, and let everything of this context go when it returns."""
    prepared = prepare(fused_alone(context_request(request, context), settings), Hooks(stage=hooks.stage))
    hooks.prepared(prepared)
    info, rows = bench_context(prepared, settings, bandwidth, hooks, request)
    plan = prepared.plan
    described = {
        "model": plan.model,
        "model_type": plan.model_type,
        "random_weights": plan.random_weights,
        "dtype": plan.dtype,
        "weights": plan.weights,
        "fp8_layers": fp8_scheme(prepared.session.model),  # also a checkpoint's own, under --weights model
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
    """Every context and contender of `settings`, under the request's engine settings (None: those in use)."""
    if request.settings is None:
        request.settings = engine_settings.current()
    with engine_settings.use(request.settings):
        return _run_bench(request, settings, hooks or BenchHooks())


def _run_bench(request: CaptureRequest, settings: BenchSettings, hooks: BenchHooks) -> BenchReport:
    device = resolve_device(request.device)
    environment = bench_environment(device)
    for contender in settings.contenders:
        if contender.on_start is not None:
            contender.on_start(device, request.inductor_cache)
    hooks.stage("measuring memory bandwidth (the floor's denominator)")
    report = BenchReport(environment, measure_bandwidth(device), {}, settings=request.settings.as_dict())
    for context in settings.contexts or (None,):
        info, rows, described = _one_context(request, context, settings, report.bandwidth, hooks)
        report.contexts.append(info)
        report.rows += rows
        release(device)
    fill_speedups(report.rows)
    if request.tp == 1:  # ranks run sharded shapes
        note_table_coverage(
            environment, device, request.model, request.revision, described.get("buckets", ()), request.weights
        )
    environment["sm_clock_mhz_end"] = sm_clock_mhz(device)
    report.run = {
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
