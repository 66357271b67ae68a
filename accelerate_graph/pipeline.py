"""The path every command shares: resolve settings, load, build the session, capture, make a plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .backends import EmulatedBackend, backend_for
from .capture import BucketCapture, DecodeGraphs, capture_decode_graphs
from .decode_session import DecodeSession
from .devices import dtype_name, resolve_device, resolve_dtype
from .environment import environment_info
from .errors import BadOptionError, CaptureError
from .loading import LoadedModel, load_model
from .plan import Plan
from .recipes import DEFAULT_RECIPE, RecipeDefaults

MODES = ("auto", "full", "eager")


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


@dataclass
class Hooks:
    """Progress callbacks; the CLI draws them, library users may ignore them."""

    stage: Callable[[str], None] = lambda text: None
    captured: Callable[[BucketCapture], None] = lambda capture: None
    bucket_count: Callable[[int], None] = lambda count: None


@dataclass
class Prepared:
    loaded: LoadedModel
    plan: Plan
    graphs: DecodeGraphs | None  # None in eager mode
    session: DecodeSession
    notes: list[str] = field(default_factory=list)


def _settings(request: CaptureRequest, loaded: LoadedModel) -> tuple[tuple[int, ...], int, int]:
    defaults = loaded.recipe.defaults if loaded.recipe else RecipeDefaults()
    buckets = tuple(sorted(request.buckets or defaults.buckets))
    cache_len = request.max_cache_len or defaults.max_cache_len
    prompt_len = request.prompt_len or min(defaults.prompt_len, cache_len // 2)
    if cache_len < 2:
        raise BadOptionError(f"--max-cache-len {cache_len} is too small.", "Use at least 2.")
    if prompt_len >= cache_len:
        raise BadOptionError(
            f"--prompt-len {prompt_len} leaves no room in a cache of {cache_len} slots.",
            "Lower --prompt-len or raise --max-cache-len.",
        )
    return buckets, cache_len, prompt_len


def _detect_hazard(session: DecodeSession, bucket: int) -> str | None:
    """Record one step with the emulator (on any device): it refuses host syncs exactly as a capture
    would, without risking the CUDA context. Returns the reason, or None when the step looks safe."""
    snapshot = session.kv.snapshot(session.max_batch)
    try:
        EmulatedBackend().capture(session.step_fn(bucket), warmups=0)
    except CaptureError as err:
        return str(err)
    finally:
        session.kv.restore(snapshot)
    return None


def prepare(request: CaptureRequest, hooks: Hooks | None = None) -> Prepared:
    hooks = hooks or Hooks()
    if request.mode not in MODES:
        raise BadOptionError(f"--mode {request.mode!r} is not one of {', '.join(MODES)}.")
    device = resolve_device(request.device)
    dtype = resolve_dtype(request.dtype, device)
    if request.attn not in ("sdpa", "eager"):
        raise BadOptionError(f"--attn {request.attn!r} is not supported.", "Use sdpa or eager.")
    hooks.stage(f"loading {request.model}")
    loaded = load_model(request.model, device, dtype, request.attn, request.revision)
    buckets, cache_len, prompt_len = _settings(request, loaded)
    hooks.stage("allocating the static cache")
    session = DecodeSession(loaded.model, max(buckets), cache_len)
    notes = list(loaded.notes)

    mode, reason = ("eager", "--mode eager") if request.mode == "eager" else ("full", "whole decode step")
    if mode == "full":
        hooks.stage("checking the decode step for graph hazards")
        hazard = _detect_hazard(session, buckets[0])
        if hazard and request.mode == "full":
            raise CaptureError(f"--mode full refused: {hazard}")
        if hazard:
            mode, reason = "eager", hazard
            notes.append(f"running eagerly: {hazard}")

    graphs = None
    backend_name = "none"
    if mode == "full":
        backend = backend_for(device, emulate=request.emulate)
        backend_name = backend.name
        hooks.bucket_count(len(buckets))
        graphs = capture_decode_graphs(session, backend, buckets, hooks.captured)

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
        buckets=list(buckets),
        max_cache_len=cache_len,
        prompt_len=prompt_len,
        regions=[{"path": "", "class": type(loaded.model).__name__, "run": "graph" if mode == "full" else "eager",
                  "reason": reason}],
        captures=[vars(c) for c in graphs.captures()] if graphs else [],
        environment=environment_info(device),
        backend=backend_name,
    )
    return Prepared(loaded, plan, graphs, session, notes)


def request_from_plan(plan: Plan, **overrides) -> CaptureRequest:
    """Re-capture what a plan describes; `overrides` (e.g. buckets) take precedence when not None."""
    request = CaptureRequest(
        model=plan.model,
        buckets=tuple(plan.buckets),
        mode="full" if plan.mode == "full" else "eager",
        dtype=plan.dtype,
        device=plan.device,
        attn=plan.attn,
        max_cache_len=plan.max_cache_len,
        prompt_len=plan.prompt_len,
        revision=plan.revision,
    )
    for key, value in overrides.items():
        if value is not None:
            setattr(request, key, value)
    return request


def total_graph_memory(graphs: DecodeGraphs) -> int:
    return sum(c.memory_bytes for c in graphs.captures())


def free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
