"""The path every command shares: resolve settings, load, build the session, capture, make a plan.

--tp (distributed) and --fuse (fused.layers: inductor, triton kernels) are imported where a request
asks for them: a plain capture, and `generate`'s first token, wait for neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.devices import dtype_name, resolve_device, resolve_dtype
from accelerate_graph.common.environment import environment_info
from accelerate_graph.common.errors import BadOptionError, CaptureError, VerificationError
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.buckets import resolve_contexts
from accelerate_graph.core.capture import BucketCapture, DecodeGraphs, capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.memory import MemoryBudget, command_bound, reset_peak
from accelerate_graph.core.plan import ATTENTIONS, MODES, Plan
from accelerate_graph.core.preflight import preflight
from accelerate_graph.detect.fixes import MODEL_FIXES
from accelerate_graph.detect.hazards import Hazard, find_hazards
from accelerate_graph.detect.regions import RegionPlan, eager_plan, plan_regions
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.models.fingerprint import model_fingerprint
from accelerate_graph.models.limits import cache_length, peek_config
from accelerate_graph.models.loading import LoadedModel, load_model
from accelerate_graph.models.recipes import DEFAULT_RECIPE, RecipeDefaults
from accelerate_graph.verify.against_eager import verify_batch
from accelerate_graph.verify.finite import check_first_step

REQUEST_MODES = ("auto", *MODES)  # auto: the plan's mode is decided from the hazards found


@dataclass
class CaptureRequest:
    model: str = DEFAULT_RECIPE
    buckets: tuple[int, ...] | None = None  # None: the recipe's, else the engines' defaults
    mode: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    attn: str = "sdpa"
    max_cache_len: int | None = None
    prompt_len: int | None = None
    revision: str | None = None
    emulate: bool = False  # emulated graphs even on a GPU
    max_memory_mib: float | None = None  # cap on graph memory: buckets that do not fit are dropped
    contexts: tuple[int, ...] | None = None  # context buckets; None: powers of two up to the cache length
    fuse: bool = False  # compile the step with inductor (no inductor graphs), then capture it
    inductor_cache: str | None = None  # where --fuse keeps compiled kernels (beside the plan)
    tp: int = 1  # tensor-parallel ranks; above 1 this process is one of them (distributed.launch)
    lazy: bool = False  # capture each graph on its first use (generate: the first token waits for fewer)
    settings: engine_settings.Settings | None = None  # the engine's settings; None: those in use now


@dataclass
class Hooks:
    """Progress callbacks; the CLI draws them, library users may ignore them."""

    stage: Callable[[str], None] = lambda text: None
    captured: Callable[[BucketCapture], None] = lambda capture: None
    bucket_count: Callable[[int], None] = lambda count: None
    loaded: Callable[[LoadedModel], None] = lambda loaded: None
    decided: Callable[[Decision], None] = lambda decision: None  # the region plan, before any capture


@dataclass
class Prepared:
    loaded: LoadedModel
    plan: Plan
    graphs: DecodeGraphs | None  # None in eager mode
    session: DecodeSession
    notes: list[str] = field(default_factory=list)
    hazards: list[Hazard] = field(default_factory=list)
    preflight: str = ""  # what the memory preflight checked, or why it was skipped

    def memory_bound(self, steps: int = 3, extra: dict | None = None, graph_bytes: int = 0) -> MemoryBudget:
        """The stated bound on the decode session's peak device memory after checks of `steps` steps."""
        if self.graphs is not None:
            graph_bytes += sum(c.memory_bytes for c in self.graphs.captures())
        fuse = self.plan.fuse or self.session.fused is not None
        return command_bound(self.session, graph_bytes, self.plan.prompt_len, steps, fuse, extra)

    @property
    def compile_seconds(self) -> float:
        """--fuse (or bench's fused contender): inductor's share of the capture time so far."""
        return self.session.fused.compile_seconds if self.session.fused else 0.0


# Hazard detection decodes at slots 1-3 after the prompt's first: a smaller cache cannot hold them.
MIN_CACHE_LEN = 4


def _settings(request: CaptureRequest, loaded: LoadedModel, notes: list[str]) -> tuple[tuple[int, ...], int, int]:
    defaults = loaded.recipe.defaults if loaded.recipe else RecipeDefaults()
    buckets = tuple(sorted(request.buckets or defaults.buckets))
    cache_len, shortened = cache_length(request.max_cache_len, defaults.max_cache_len, loaded.model.config)
    notes += [shortened] if shortened else []
    prompt_len = request.prompt_len or min(defaults.prompt_len, cache_len // 2)
    if cache_len < MIN_CACHE_LEN:
        raise BadOptionError(
            f"--max-cache-len {cache_len} is too small: finding graph hazards decodes {MIN_CACHE_LEN - 1} "
            "tokens after a prompt token.",
            f"Use at least {MIN_CACHE_LEN}.",
        )
    if request.prompt_len is None and prompt_len < defaults.prompt_len:
        notes.append(
            f"the prompt is {prompt_len} tokens, not {defaults.prompt_len}: half of --max-cache-len {cache_len} "
            "(pass --prompt-len to choose)."
        )
    if prompt_len >= cache_len:
        raise BadOptionError(
            f"--prompt-len {prompt_len} leaves no room in a cache of {cache_len} slots.",
            "Lower --prompt-len or raise --max-cache-len.",
        )
    return buckets, cache_len, prompt_len


@dataclass
class Decision:
    regions: RegionPlan
    hazards: list[Hazard]
    fixes: list[str]


def decide_regions(session: DecodeSession, request_mode: str, bucket: int) -> Decision:
    """Detect hazards, apply the fixes that keep the step whole (MODEL_FIXES, in order), and choose
    full / piecewise / eager. `--mode eager` looks for no hazard: the fixes see none."""
    eager = request_mode == "eager"
    hazards = [] if eager else find_hazards(session, bucket)

    def redetect() -> list[Hazard]:
        return find_hazards(session, bucket)

    fixes = []
    for fix in MODEL_FIXES:
        done, hazards = fix.apply(session, hazards, redetect)
        fixes += [done] if done else []
    if eager:
        return Decision(eager_plan(session.model, "--mode eager"), [], fixes)
    if hazards and request_mode == "full":
        raise CaptureError(
            f"--mode full refused: {hazards[0].describe()}",
            "Use --mode auto (graph segments around the hazard) or --mode eager.",
        )
    regions = plan_regions(session.model, hazards)
    if regions.mode == "eager" and request_mode == "piecewise":
        raise CaptureError(f"--mode piecewise refused: {regions.reason}", "Use --mode eager.")
    return Decision(regions, hazards, fixes)


def _quick_check(graphs: DecodeGraphs, prompt_len: int) -> None:
    """A short run of `verify`'s own check (the same criterion) on the largest bucket (and under --fuse
    on the smallest, which has its own compilation): no plan and no bench row claims graphs that were
    never checked."""
    fused = graphs.session.fused is not None
    buckets = (graphs.buckets[-1], graphs.buckets[0]) if fused else (graphs.buckets[-1],)
    for bucket in dict.fromkeys(buckets):  # one bucket only: checked once
        check = verify_batch(graphs, bucket, bucket, steps=3, prompt_len=min(prompt_len, 8))
        if not check.passed:
            raise VerificationError(
                f"replay was further from the float32 reference than eager allows, right after capture "
                f"(bucket {check.bucket}"
                f"{', fused' if fused else ''}): {check.detail[:300]}",
                graphs.session.fused.refusal_hint if fused else "Use --mode eager and report the model.",
            )


def prepare(request: CaptureRequest, hooks: Hooks | None = None) -> Prepared:
    """Load, detect, capture and check what `request` asks for, under its settings (which the request
    then holds: the graphs' later replays and eager runs go on under them)."""
    if request.settings is None:
        request.settings = engine_settings.current()
    with engine_settings.use(request.settings):
        return _prepare(request, hooks or Hooks())


def _prepare(request: CaptureRequest, hooks: Hooks) -> Prepared:
    if request.mode not in REQUEST_MODES:
        raise BadOptionError(f"--mode {request.mode!r} is not one of {', '.join(REQUEST_MODES)}.")
    device = resolve_device(request.device)
    dtype = resolve_dtype(request.dtype, device)
    reset_peak(device)  # a command's peak device memory counts from here
    if request.attn not in ATTENTIONS:
        raise BadOptionError(f"--attn {request.attn!r} is not supported.", f"Use {', '.join(ATTENTIONS)}.")
    if request.tp > 1 and request.max_memory_mib is not None:
        raise BadOptionError(
            "--max-memory with --tp is not supported: each rank would drop buckets on its own measurements.",
            "Drop --max-memory, or lower the largest --buckets value.",
        )
    if request.tp > 1:  # this rank's device (cuda:LOCAL_RANK, or the CPU over gloo)
        from accelerate_graph.distributed.rank import join as join_group

        device = join_group(request.tp, device).device
    if request.fuse:
        from accelerate_graph.fused.layers import warm_compile_workers

        warm_compile_workers(device, request.inductor_cache)
    config = peek_config(request.model, request.revision)
    if config is not None:  # a cache longer than the model's positions is refused before any weight loads
        cache_length(request.max_cache_len, RecipeDefaults().max_cache_len, config)
    hooks.stage(f"loading {request.model}")
    loaded = load_model(
        request.model, device, dtype, "sdpa" if request.attn == "grouped" else request.attn, request.revision
    )
    if loaded.attn == "sdpa" and (request.attn == "grouped" or request.fuse):
        # --fuse runs grouped attention: inductor on CUDA failed to lower HF's sdpa decode path with a
        # dynamic batch (a broadcast of the batch size in the cache write, seen on the H200)
        use_grouped_attention(loaded.model)
        loaded.attn = "grouped"
    layout = split_for_ranks(loaded, request.tp, request.settings)
    hooks.loaded(loaded)
    notes = list(loaded.notes)  # fixes are shown with the region plan
    buckets, cache_len, prompt_len = _settings(request, loaded, notes)
    checked = preflight(loaded.model.config, dtype, device, buckets, cache_len, prompt_len, request.fuse)
    hooks.stage("allocating the static cache")
    session = DecodeSession(loaded.model, max(buckets), cache_len)
    check_first_step(session)  # NaN/Inf from the weights: one clear error before any capture
    hooks.stage("looking for graph hazards")
    decision = decide_regions(session, request.mode, buckets[0])
    hooks.decided(decision)
    mode = decision.regions.mode
    if mode == "eager" and request.mode == "auto":
        notes.append(f"running eagerly: {decision.regions.reason}")

    if request.fuse and mode != "full":
        raise CaptureError(
            f"--fuse captures the whole step as one graph around its compiled layers, but this plan is {mode}: {decision.regions.reason}",
            "Drop --fuse: graph segments around the eager islands still remove the launch overhead.",
        )
    graphs = None
    backend_name = "none"
    contexts = resolve_contexts(request.contexts, cache_len)
    if mode != "eager":
        backend = backend_for(device, emulate=request.emulate)
        backend_name = backend.name
        if request.tp > 1:
            backend = _aligned(backend)
        if request.fuse:
            _start_fusing(session, request)
        islands = [session.model.get_submodule(path) for path in decision.regions.islands]
        cap = int(request.max_memory_mib * 2**20) if request.max_memory_mib is not None else None
        lazy = request.lazy and request.tp == 1 and cap is None  # ranks capture in step: all up front
        if not lazy:
            hooks.bucket_count(len(buckets) * len(contexts))
        captured = None if lazy else hooks.captured  # lazy captures happen after the progress display
        graphs = capture_decode_graphs(session, backend, buckets, captured, islands, cap, contexts, lazy)
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
        _quick_check(graphs, prompt_len)

    plan = Plan(
        model=loaded.reference,
        model_kind=loaded.kind,
        model_type=str(loaded.model.config.model_type),
        random_weights=loaded.random_weights,
        revision=loaded.revision,
        dtype=dtype_name(dtype),
        device=str(device),
        attn=loaded.attn,
        mode=mode,
        buckets=list(graphs.buckets) if graphs else list(buckets),
        contexts=list(graphs.contexts) if graphs else [cache_len],
        fuse=request.fuse,
        max_cache_len=cache_len,
        prompt_len=prompt_len,
        regions=decision.regions.regions,
        captures=[vars(c) for c in graphs.captures()] if graphs else [],
        environment=environment_info(device),
        backend=backend_name,
        fixes=decision.fixes,
        fingerprint=model_fingerprint(loaded.reference, loaded.kind, loaded.revision),
        tp=request.tp,
        tp_layout=layout,
        settings=request.settings.recorded(),
    )
    return Prepared(loaded, plan, graphs, session, notes, decision.hazards, checked)


def split_for_ranks(loaded: LoadedModel, tp: int, settings: engine_settings.Settings) -> list[dict]:
    """Under --tp N: split the model by its tensor-parallel plan; every rank's layout, in rank order."""
    if tp <= 1:
        return []
    from accelerate_graph.distributed.all_reduce import requested_kind as requested_all_reduce
    from accelerate_graph.distributed.rank import gather_objects
    from accelerate_graph.distributed.rank import join as join_group
    from accelerate_graph.distributed.sharding import check_can_split, shard_model, share_rank0_weights

    info = join_group(tp, loaded.device)
    check_can_split(loaded.model, tp, loaded.reference)
    if loaded.random_weights:
        share_rank0_weights(loaded.model)
    mine = shard_model(loaded.model, info.rank, tp, loaded.reference, requested_all_reduce(settings))
    loaded.notes.append(
        f"tensor parallel over {tp} ranks: {mine['split_layers']} layers split, "
        f"{mine['attention_heads']} attention heads and {mine['kv_heads']} KV heads per rank, "
        f"all-reduce {mine['all_reduce']}"
    )
    return gather_objects({**mine, "device": str(info.device)})


def _aligned(backend):
    """Under --tp: captures and replays in step across the ranks (distributed.aligned)."""
    from accelerate_graph.distributed.aligned import AlignedBackend

    return AlignedBackend(backend)


def _start_fusing(session: DecodeSession, request: CaptureRequest) -> None:
    """From now on captures record the inductor-compiled step, its kernels kept where the request says."""
    from accelerate_graph.fused.layers import FusedForward, use_cache_dir

    use_cache_dir(request.inductor_cache)
    session.fused = FusedForward(session.model, positions=session.kv.storage_len, settings=request.settings)


def capture_fused(prepared: Prepared, request: CaptureRequest) -> DecodeGraphs:
    """Graphs of our best mode on an already prepared session (bench's `fused` contender): the step
    compiled by inductor, with grouped-query decode attention where the plan uses sdpa, over the plan's
    buckets and context buckets, one compilation. The session's own step keeps its attention, so the
    other contenders run what the plan runs."""
    if request.settings is None:
        request.settings = engine_settings.current()
    with engine_settings.use(request.settings):
        return _capture_fused(prepared, request)


def _capture_fused(prepared: Prepared, request: CaptureRequest) -> DecodeGraphs:
    plan, session = prepared.plan, prepared.session
    if plan.mode != "full":
        raise CaptureError(
            f"--fuse captures the whole step as one graph around its compiled layers, but this plan is {plan.mode}.",
            "Leave fused out of --compare for this model.",
        )
    _start_fusing(session, request)
    backend = backend_for(session.device, emulate=request.emulate)
    if plan.tp > 1:
        backend = _aligned(backend)
    undo = use_grouped_attention(session.model) if plan.attn == "sdpa" else (lambda: None)
    try:  # graphs keep the kernels they recorded: switching the attention back changes none of them
        graphs = capture_decode_graphs(session, backend, tuple(plan.buckets), contexts=tuple(plan.contexts))
        _quick_check(graphs, plan.prompt_len)
        return graphs
    finally:
        undo()


def request_from_plan(plan: Plan, **overrides) -> CaptureRequest:
    """Re-capture what a plan describes, under the settings it records; `overrides` (e.g. buckets, or
    settings resolved over the plan's) take precedence when not None."""
    request = CaptureRequest(
        model=plan.model,
        buckets=tuple(plan.buckets),
        mode=plan.mode,
        dtype=plan.dtype,
        device=plan.device,
        attn=plan.attn,
        max_cache_len=plan.max_cache_len,
        prompt_len=plan.prompt_len,
        revision=plan.revision,
        contexts=tuple(plan.contexts),
        fuse=plan.fuse,
        tp=plan.tp,
        settings=engine_settings.from_recorded(plan.settings, "the plan"),
    )
    for key, value in overrides.items():
        if value is not None:
            setattr(request, key, value)
    return request
