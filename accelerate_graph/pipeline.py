"""The path every command shares: resolve settings, load the model, run the capture flow on it
(capture_flow.py), make a plan.

--tp (distributed) and --fuse (fused.layers: inductor, triton kernels) are imported where a request
asks for them: a plain capture, and `generate`'s first token, wait for neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelerate_graph import settings as engine_settings
from accelerate_graph.capture_flow import (
    REQUEST_MODES,
    GraphRequest,
    Hooks,
    capture_model,
    capture_on_session,
    resolve_cache_len,
)
from accelerate_graph.common.devices import dtype_name, resolve_device, resolve_dtype
from accelerate_graph.common.environment import environment_info
from accelerate_graph.common.errors import BadOptionError, CaptureError, option
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.memory import MemoryBudget, command_bound, peak_bytes, reset_peak
from accelerate_graph.core.plan import ATTENTIONS, Plan
from accelerate_graph.core.preflight import preflight
from accelerate_graph.detect.hazards import Hazard
from accelerate_graph.fused.grouped_attention import stands_in_for, use_grouped_attention
from accelerate_graph.models.fingerprint import model_fingerprint
from accelerate_graph.models.limits import peek_config
from accelerate_graph.models.loading import LoadedModel, load_model
from accelerate_graph.models.recipes import DEFAULT_RECIPE, RecipeDefaults
from accelerate_graph.quant.quantize import check_fp8_dtype, check_weights, ensure_weights


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
    weights: str = "model"  # model, fp8 or fp8-block: the decoder's Linear layers in FP8 (quant/)
    settings: engine_settings.Settings | None = None  # the engine's settings; None: those in use now
    per_row: bool = False  # each row writes at its own position (serve.engine.SlotEngine's continuous batching)


@dataclass
class Prepared:
    loaded: LoadedModel
    plan: Plan
    graphs: DecodeGraphs | None  # None in eager mode
    session: DecodeSession
    notes: list[str] = field(default_factory=list)
    hazards: list[Hazard] = field(default_factory=list)
    preflight: str = ""  # what the memory preflight checked, or why it was skipped
    loading_peak: int | None = None  # the device's peak through loading and quantizing on load (None: the CPU)

    def memory_bound(self, steps: int = 3, extra: dict | None = None, graph_bytes: int = 0) -> MemoryBudget:
        """The stated bound on the decode session's peak device memory after checks of `steps` steps."""
        if self.graphs is not None:
            graph_bytes += sum(c.memory_bytes for c in self.graphs.captures())
        fuse = self.plan.fuse or self.session.fused is not None
        return command_bound(self.session, graph_bytes, self.plan.prompt_len, steps, fuse, extra, self.loading_peak)

    @property
    def compile_seconds(self) -> float:
        """--fuse (or bench's fused contender): inductor's share of the capture time so far."""
        return self.session.fused.compile_seconds if self.session.fused else 0.0


def _lengths(request: CaptureRequest, loaded: LoadedModel, notes: list[str]) -> tuple[tuple[int, ...], int, int]:
    """Buckets, cache length and prompt length: the request's, else the recipe's, else the engine's."""
    defaults = loaded.recipe.defaults if loaded.recipe else RecipeDefaults()
    buckets = tuple(sorted(request.buckets or defaults.buckets))
    cache_len, shortened = resolve_cache_len(request.max_cache_len, defaults.max_cache_len, loaded.model.config)
    notes += [shortened] if shortened else []
    prompt_len = request.prompt_len or min(defaults.prompt_len, cache_len // 2)
    if request.prompt_len is None and prompt_len < defaults.prompt_len:
        notes.append(
            f"the prompt is {prompt_len} tokens, not {defaults.prompt_len}: half of --max-cache-len {cache_len} "
            "(pass --prompt-len to choose)."
        )
    if prompt_len >= cache_len:
        raise BadOptionError(
            f"{option('prompt_len', prompt_len)} leaves no room in a cache of {cache_len} slots.",
            f"Lower {option('prompt_len')} or raise {option('max_cache_len')}.",
        )
    return buckets, cache_len, prompt_len


def prepare(request: CaptureRequest, hooks: Hooks | None = None) -> Prepared:
    """Load, detect, capture and check what `request` asks for, under its settings (which the request
    then holds: the graphs' later replays and eager runs go on under them)."""
    if request.settings is None:
        request.settings = engine_settings.current()
    with engine_settings.use(request.settings):
        return _prepare(request, hooks or Hooks())


def _prepare(request: CaptureRequest, hooks: Hooks) -> Prepared:
    if request.mode not in REQUEST_MODES:
        raise BadOptionError(f"{option('mode', request.mode)} is not one of {', '.join(REQUEST_MODES)}.")
    device = resolve_device(request.device)
    dtype = resolve_dtype(request.dtype, device)
    reset_peak(device)  # a command's peak device memory counts from here
    check_request_weights(request.weights, dtype, request.tp)
    if request.attn not in ATTENTIONS:
        raise BadOptionError(f"{option('attn', request.attn)} is not supported.", f"Use {', '.join(ATTENTIONS)}.")
    if request.tp > 1 and request.max_memory_mib is not None:
        raise BadOptionError(
            f"{option('max_memory_mib')} with {option('tp')} is not supported: each rank would drop buckets on "
            "its own measurements.",
            f"Drop {option('max_memory_mib')}, or lower the largest {option('buckets')} value.",
        )
    if request.tp > 1:  # this rank's device (cuda:LOCAL_RANK, or the CPU over gloo)
        from accelerate_graph.distributed.rank import join as join_group

        device = join_group(request.tp, device).device
    if request.fuse:
        from accelerate_graph.fused.layers import warm_compile_workers

        warm_compile_workers(device, request.inductor_cache)
    config = peek_config(request.model, request.revision)
    if config is not None:  # a cache longer than the model's positions is refused before any weight loads
        resolve_cache_len(request.max_cache_len, RecipeDefaults().max_cache_len, config)
    hooks.stage(f"loading {request.model}")
    loaded = load_model(
        request.model, device, dtype, "sdpa" if request.attn == "grouped" else request.attn, request.revision
    )
    grouping = request.attn == "grouped" or (request.fuse and request.attn == "sdpa")
    if grouping and loaded.attn == stands_in_for(loaded.model):
        # --fuse runs grouped attention: inductor on CUDA failed to lower HF's sdpa decode path with a
        # dynamic batch (a broadcast of the batch size in the cache write, seen on the H200)
        use_grouped_attention(loaded.model)
        loaded.attn = "grouped"
    layout = split_for_ranks(loaded, request.tp, request.settings)
    hooks.loaded(loaded)
    notes = list(loaded.notes)  # fixes are shown with the region plan
    quantized = ensure_weights(loaded.model, request.weights)  # before the preflight: it sees FP8 weights
    loading_peak = peak_bytes(device)
    notes += [quantized.describe()] if quantized is not None else []
    buckets, cache_len, prompt_len = _lengths(request, loaded, notes)
    checked = preflight(loaded.model.config, dtype, device, buckets, cache_len, prompt_len, request.fuse)
    flow = GraphRequest(
        buckets=buckets,
        cache_len=cache_len,
        prompt_len=prompt_len,
        settings=request.settings,
        mode=request.mode,
        contexts=request.contexts,
        fuse=request.fuse,
        inductor_cache=request.inductor_cache,
        emulate=request.emulate,
        tp=request.tp,
        max_memory_mib=request.max_memory_mib,
        lazy=request.lazy,
        per_row=request.per_row,
        weights=request.weights,
    )
    captured = capture_model(loaded.model, flow, hooks)
    notes += captured.notes
    graphs, decision = captured.graphs, captured.decision
    plan = Plan(
        model=loaded.reference,
        model_kind=loaded.kind,
        model_type=str(loaded.model.config.model_type),
        random_weights=loaded.random_weights,
        revision=loaded.revision,
        dtype=dtype_name(dtype),
        device=str(device),
        attn=loaded.attn,
        mode=decision.regions.mode,
        buckets=list(graphs.buckets) if graphs else list(buckets),
        contexts=list(graphs.contexts) if graphs else [cache_len],
        fuse=request.fuse,
        max_cache_len=cache_len,
        prompt_len=prompt_len,
        regions=decision.regions.regions,
        captures=[vars(c) for c in graphs.captures()] if graphs else [],
        environment=environment_info(device),
        backend=captured.backend,
        fixes=decision.fixes,
        fingerprint=model_fingerprint(loaded.reference, loaded.kind, loaded.revision),
        tp=request.tp,
        tp_layout=layout,
        settings=request.settings.recorded(),
        weights=request.weights,
    )
    return Prepared(loaded, plan, graphs, captured.session, notes, decision.hazards, checked, loading_peak)


def check_request_weights(weights: str, dtype, tp: int) -> None:
    """--weights fp8 / fp8-block: a bf16 or fp16 run on one device (refused before any weight loads)."""
    if check_weights(weights) == "model":
        return
    check_fp8_dtype(dtype, f"{option('weights', weights)}")
    check_weights_split(weights, tp)


def check_weights_split(weights: str | None, tp: int) -> None:
    if weights not in (None, "model") and tp > 1:
        raise BadOptionError(
            f"{option('weights', weights)} with {option('tp')} is not supported: the split layers are plain "
            "Linear layers.",
            f"Drop {option('tp')}, or use {option('weights', 'model')}.",
        )


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


def capture_fused(prepared: Prepared, request: CaptureRequest) -> DecodeGraphs:
    """Graphs of our best mode on an already prepared session (bench's `fused` contender): the step
    compiled by inductor, with grouped-query decode attention where the plan uses sdpa, over the plan's
    buckets and context buckets, one compilation. The session's own step keeps its attention, so the
    other contenders run what the plan runs."""
    plan = prepared.plan
    if plan.mode != "full":
        raise CaptureError(
            f"{option('fuse')} captures the whole step as one graph around its compiled layers, but this plan "
            f"is {plan.mode}.",
            f"Leave fused out of {option('compare')} for this model.",
        )
    fused = GraphRequest(
        buckets=tuple(plan.buckets),
        cache_len=plan.max_cache_len,
        prompt_len=plan.prompt_len,
        settings=request.settings if request.settings is not None else engine_settings.current(),
        contexts=tuple(plan.contexts),
        fuse=True,
        inductor_cache=request.inductor_cache,
        emulate=request.emulate,
        tp=plan.tp,
    )
    # fusing merges q/k/v and gate/up into new tensors; the plan's graphs recorded the old ones' addresses,
    # so those stay alive while the graphs do (on the H200 they replayed NaN once their memory was reused)
    recorded = [*prepared.session.model.parameters(), *prepared.session.model.buffers()]
    graphs, _, undo = capture_on_session(prepared.session, fused)
    for step in undo:  # graphs keep the kernels they recorded: switching the attention back changes none
        step()
    if prepared.graphs is not None:
        prepared.graphs.retained = recorded
    return graphs


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
        weights=plan.weights,
        settings=engine_settings.from_recorded(plan.settings, "the plan"),
    )
    for key, value in overrides.items():
        if value is not None:
            setattr(request, key, value)
    return request
