"""The one capture flow, whoever asks: a decode session on the model, its graph hazards found and fixed,
the step optionally fused, a graph per (batch bucket, context bucket), and the quick check against eager.

`pipeline.prepare` (capture, verify, bench, generate) runs it on the model it loads, the drop-in
`accelerate(model)` on the caller's model, and bench's fused contender runs its last three steps on a
session already prepared. What differs between them is a `GraphRequest` value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.errors import BadOptionError, CaptureError, VerificationError, option
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.buckets import resolve_contexts
from accelerate_graph.core.capture import BucketCapture, DecodeGraphs, capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.plan import MODES
from accelerate_graph.detect.fixes import MODEL_FIXES
from accelerate_graph.detect.hazards import Hazard, find_hazards
from accelerate_graph.detect.regions import RegionPlan, eager_plan, plan_regions
from accelerate_graph.models.limits import cache_length
from accelerate_graph.quant.quantize import check_weights, ensure_weights
from accelerate_graph.verify.against_eager import verify_batch
from accelerate_graph.verify.finite import check_first_step

REQUEST_MODES = ("auto", *MODES)  # auto: the plan's mode is decided from the hazards found

# Hazard detection decodes at slots 1-3 after the prompt's first: a smaller cache cannot hold them.
MIN_CACHE_LEN = 4


@dataclass
class Hooks:
    """Progress callbacks; the CLI draws them, library users may ignore them."""

    stage: Callable[[str], None] = lambda text: None
    captured: Callable[[BucketCapture], None] = lambda capture: None
    bucket_count: Callable[[int], None] = lambda count: None
    loaded: Callable[[object], None] = lambda loaded: None  # the LoadedModel, once pipeline.prepare has it
    decided: Callable[[Decision], None] = lambda decision: None  # the region plan, before any capture


@dataclass(frozen=True)
class GraphRequest:
    """What the flow captures on a model already in memory; buckets come out sorted, each once."""

    buckets: tuple[int, ...]
    cache_len: int
    prompt_len: int  # the quick check prompts with at most 8 of these tokens
    settings: engine_settings.Settings
    mode: str = "auto"
    contexts: tuple[int, ...] | None = None  # context buckets; None: powers of two up to the cache length
    fuse: bool = False  # compile the step with inductor (no inductor graphs), then capture it
    inductor_cache: str | None = None  # where fusing keeps compiled kernels
    emulate: bool = False  # emulated graphs even on a GPU
    tp: int = 1  # above 1: captures and replays in step across the ranks
    max_memory_mib: float | None = None  # cap on graph memory: buckets that do not fit are dropped
    lazy: bool = False  # capture each graph on its first use (not under tp or a memory cap)
    per_row: bool = False  # each row writes at its own position (DecodeSession's per-row mode)
    weights: str = "model"  # model, fp8 or fp8-block (quant/): the decoder's Linear layers in FP8

    def __post_init__(self) -> None:
        check_weights(self.weights)
        if self.mode not in REQUEST_MODES:
            raise BadOptionError(f"{option('mode', self.mode)} is not one of {', '.join(REQUEST_MODES)}.")
        if not self.buckets or any(not isinstance(b, int) or b < 1 for b in self.buckets):
            raise BadOptionError(
                f"{option('buckets', tuple(self.buckets))} are not batch sizes.",
                f"Give whole numbers of at least 1, e.g. {option('buckets', (1, 8))}.",
            )
        object.__setattr__(self, "buckets", tuple(sorted(set(self.buckets))))


@dataclass
class Decision:
    regions: RegionPlan
    hazards: list[Hazard]
    fixes: list[str]


@dataclass
class Captured:
    session: DecodeSession
    decision: Decision
    graphs: DecodeGraphs | None  # None when the plan is eager
    backend: str  # the graph backend's name; "none" when eager
    notes: list[str] = field(default_factory=list)
    undo: list[Callable[[], None]] = field(default_factory=list)  # puts the model's attention back (fusing)


def resolve_cache_len(requested: int | None, default: int, config) -> tuple[int, str | None]:
    """The cache length (held to the model's positions: models/limits.py) and the note that it was
    shortened, or None; refused when hazard detection could not run in it."""
    cache_len, shortened = cache_length(requested, default, config)
    if cache_len < MIN_CACHE_LEN:
        raise BadOptionError(
            f"{option('max_cache_len', cache_len)} is too small: finding graph hazards decodes "
            f"{MIN_CACHE_LEN - 1} tokens after a prompt token.",
            f"Use at least {option('max_cache_len', MIN_CACHE_LEN)}.",
        )
    return cache_len, shortened


def decide_regions(session: DecodeSession, request_mode: str, bucket: int) -> Decision:
    """Detect hazards, apply the fixes that keep the step whole (MODEL_FIXES, in order), and choose
    full / piecewise / eager. Mode eager looks for no hazard: the fixes see none."""
    eager = request_mode == "eager"
    hazards = [] if eager else find_hazards(session, bucket)

    def redetect() -> list[Hazard]:
        return find_hazards(session, bucket)

    fixes = []
    for fix in MODEL_FIXES:
        done, hazards = fix.apply(session, hazards, redetect)
        fixes += [done] if done else []
    if eager:
        return Decision(eager_plan(session.model, "--mode eager"), [], fixes)  # the plan's text: kept as written
    if hazards and request_mode == "full":
        raise CaptureError(
            f"{option('mode', 'full')} refused: {hazards[0].describe()}",
            f"Use {option('mode', 'auto')} (graph segments around the hazard) or {option('mode', 'eager')}.",
        )
    regions = plan_regions(session.model, hazards)
    if regions.mode == "eager" and request_mode == "piecewise":
        raise CaptureError(
            f"{option('mode', 'piecewise')} refused: {regions.reason}", f"Use {option('mode', 'eager')}."
        )
    return Decision(regions, hazards, fixes)


def capture_model(model: torch.nn.Module, request: GraphRequest, hooks: Hooks | None = None) -> Captured:
    """The whole flow on `model`, under the request's settings: session, hazards and fixes, the region
    plan, then (unless it is eager) `capture_on_session`."""
    with engine_settings.use(request.settings):
        return _capture_model(model, request, hooks or Hooks())


def _capture_model(model: torch.nn.Module, request: GraphRequest, hooks: Hooks) -> Captured:
    quantized = ensure_weights(model, request.weights)  # None where the model has these weights already
    hooks.stage("allocating the static cache")
    session = DecodeSession(model, request.buckets[-1], request.cache_len, request.per_row)
    check_first_step(session)  # NaN/Inf from the weights: one clear error before any capture
    hooks.stage("looking for graph hazards")
    decision = decide_regions(session, request.mode, request.buckets[0])
    hooks.decided(decision)
    mode = decision.regions.mode
    captured = Captured(session, decision, None, "none")
    if quantized is not None:
        captured.notes.append(quantized.describe())
    if mode == "eager" and request.mode == "auto":
        captured.notes.append(f"running eagerly: {decision.regions.reason}")
    if request.fuse and mode != "full":
        raise CaptureError(
            f"{option('fuse')} captures the whole step as one graph around its compiled layers, but this plan "
            f"is {mode}: {decision.regions.reason}",
            f"Capture without fusing ({option('fuse', False)}): graph segments around the eager islands still "
            "remove the launch overhead.",
        )
    if mode != "eager":
        islands = [model.get_submodule(path) for path in decision.regions.islands]
        captured.graphs, captured.backend, captured.undo = _capture_on_session(
            session, request, islands, hooks, captured.notes
        )
    return captured


def capture_on_session(
    session: DecodeSession,
    request: GraphRequest,
    islands: Sequence[torch.nn.Module] = (),
    hooks: Hooks | None = None,
    notes: list[str] | None = None,
) -> tuple[DecodeGraphs, str, list[Callable[[], None]]]:
    """On a session whose regions are decided, under the request's settings: fusing when asked for, a
    graph per (batch bucket, context bucket), the quick check. Returns the graphs, the backend's name and
    what puts the model's attention back (the graphs keep the kernels they recorded either way)."""
    with engine_settings.use(request.settings):
        return _capture_on_session(session, request, islands, hooks or Hooks(), notes if notes is not None else [])


def _capture_on_session(session, request, islands, hooks, notes):
    backend = backend_for(session.device, emulate=request.emulate)
    backend_name = backend.name
    if request.tp > 1:
        backend = _aligned(backend)
    undo: list[Callable[[], None]] = []
    try:
        if request.fuse:
            undo.append(_start_fusing(session, request))
        cap = int(request.max_memory_mib * 2**20) if request.max_memory_mib is not None else None
        lazy = request.lazy and request.tp == 1 and cap is None  # ranks capture in step: all up front
        contexts = resolve_contexts(request.contexts, request.cache_len)
        if not lazy:
            hooks.bucket_count(len(request.buckets) * len(contexts))
        captured = None if lazy else hooks.captured  # lazy captures happen after the progress display
        graphs = capture_decode_graphs(session, backend, request.buckets, captured, islands, cap, contexts, lazy)
        if session.fused is not None and session.fused.recompiles:
            notes.append(
                f"inductor recompiled the layers {session.fused.recompiles} time(s) for shapes it had "
                "specialised on; the capture time includes each."
            )
        if graphs.dropped:
            notes.append(
                f"--max-memory dropped bucket(s) {', '.join(map(str, graphs.dropped))}: their graphs "
                f"did not fit; larger batches now run in bucket {graphs.buckets[-1]} or eagerly."
            )
        hooks.stage("checking replay against eager")
        quick_check(graphs, request.prompt_len)
    except BaseException:
        for step in reversed(undo):
            step()
        raise
    return graphs, backend_name, undo


def quick_check(graphs: DecodeGraphs, prompt_len: int) -> None:
    """A short run of `verify`'s own check (the same criterion) on the largest bucket (and when fused on
    the smallest, which has its own compilation): no plan, bench row or drop-in handle claims graphs that
    were never checked."""
    fused = graphs.session.fused is not None
    buckets = (graphs.buckets[-1], graphs.buckets[0]) if fused else (graphs.buckets[-1],)
    for bucket in dict.fromkeys(buckets):  # one bucket only: checked once
        check = verify_batch(graphs, bucket, bucket, steps=3, prompt_len=min(prompt_len, 8))
        if not check.passed:
            raise VerificationError(
                f"replay was further from the float32 reference than eager allows, right after capture "
                f"(bucket {check.bucket}"
                f"{', fused' if fused else ''}): {check.detail[:300]}",
                graphs.session.fused.refusal_hint if fused else f"Use {option('mode', 'eager')} and report the model.",
            )


def _aligned(backend):
    """Under tp: captures and replays in step across the ranks (distributed.aligned)."""
    from accelerate_graph.distributed.aligned import AlignedBackend

    return AlignedBackend(backend)


def _start_fusing(session: DecodeSession, request: GraphRequest) -> Callable[[], None]:
    """From now on captures record the inductor-compiled step over grouped decode attention (in place of
    HF's, grouped_attention.stands_in_for), its kernels kept where the request says. Returns what switches
    the attention back."""
    from accelerate_graph.fused.grouped_attention import use_grouped_attention
    from accelerate_graph.fused.layers import FusedForward, use_cache_dir

    use_cache_dir(request.inductor_cache)
    undo = use_grouped_attention(session.model)
    session.fused = FusedForward(session.model, positions=session.kv.storage_len, settings=request.settings)
    return undo
