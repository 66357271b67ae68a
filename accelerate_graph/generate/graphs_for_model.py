"""Graphs for a model the caller already holds (the drop-in): the steps `prepare` runs after loading."""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.errors import BadOptionError, CaptureError, VerificationError


def capture_for_model(
    model: torch.nn.Module,
    buckets: tuple[int, ...],
    max_cache_len: int,
    fuse: bool,
    mode: str,
    contexts: tuple[int, ...] | None,
    emulate: bool,
    settings: engine_settings.Settings,
) -> tuple[object, list[Callable[[], None]]]:
    """Detect, fix, capture and check, as `capture` does, under `settings`; returns the graphs and what
    undoes the changes made to the model (its attention under `fuse`)."""
    with engine_settings.use(settings):
        return _capture(model, buckets, max_cache_len, fuse, mode, contexts, emulate, settings)


def _capture(model, buckets, max_cache_len, fuse, mode, contexts, emulate, settings):
    from accelerate_graph.core.backends import backend_for
    from accelerate_graph.core.buckets import resolve_contexts
    from accelerate_graph.core.capture import capture_decode_graphs
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.pipeline import REQUEST_MODES, decide_regions
    from accelerate_graph.verify.against_eager import verify_batch
    from accelerate_graph.verify.finite import check_first_step

    if mode not in REQUEST_MODES or mode == "eager":
        raise BadOptionError(f"mode {mode!r} is not one of auto, full, piecewise.")
    if not buckets or min(buckets) < 1:
        raise BadOptionError(f"buckets {buckets!r} are invalid.", "Give batch sizes of at least 1, e.g. (1, 8).")
    buckets = tuple(sorted(set(buckets)))
    undo: list[Callable[[], None]] = []
    session = DecodeSession(model, buckets[-1], max_cache_len)
    check_first_step(session)  # NaN/Inf from the weights: one clear error before any capture
    decision = decide_regions(session, mode, buckets[0])
    if decision.regions.mode == "eager":
        raise CaptureError(f"no graph can be captured for this model: {decision.regions.reason}")
    if fuse:
        undo.append(_start_fusing(session, decision.regions.mode, settings))
    islands = [model.get_submodule(path) for path in decision.regions.islands]
    graphs = capture_decode_graphs(
        session,
        backend_for(session.device, emulate=emulate),
        buckets,
        islands=islands,
        contexts=resolve_contexts(contexts, max_cache_len),
    )
    check = verify_batch(graphs, buckets[-1], buckets[-1], steps=3, prompt_len=min(8, max_cache_len // 2))
    if not check.passed:
        for step in undo:
            step()
        raise VerificationError(
            f"replay was further from the float32 reference than eager allows, right after capture: "
            f"{check.detail[:300]}"
        )
    return graphs, undo


def _start_fusing(session, mode: str, settings: engine_settings.Settings) -> Callable[[], None]:
    from accelerate_graph.fused.grouped_attention import use_grouped_attention
    from accelerate_graph.fused.layers import FusedForward

    if mode != "full":
        raise CaptureError(f"fuse=True needs the whole step in one graph, but this model's plan is {mode}.")
    undo = use_grouped_attention(session.model)
    session.fused = FusedForward(session.model, positions=session.kv.storage_len, settings=settings)
    return undo
