"""Fixes that keep a decode step whole instead of cutting it into pieces, each applied only where needed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.host_constants import HostConstants
from accelerate_graph.detect.hazards import Hazard

SAFE_EXPERTS = "batched_mm"  # HF's experts implementation that gathers weights per token: no host reads


def _in_moe(hazard: Hazard) -> bool:
    text = f"{hazard.module_path} {hazard.module_class}".lower()
    return "expert" in text or "moe" in text


def use_capture_safe_experts(
    model: torch.nn.Module, hazards: list[Hazard], redetect: Callable[[], list[Hazard]]
) -> tuple[str | None, list[Hazard]]:
    """Switch MoE experts to `batched_mm` when hazards sit in MoE blocks, and keep the switch only if
    it removed some of them. Returns (what was done or None, the hazards now)."""
    current = model.get_experts_implementation()[""] if hasattr(model, "get_experts_implementation") else None
    before = [h for h in hazards if _in_moe(h)]
    if current in (None, SAFE_EXPERTS) or not before:
        return None, hazards
    try:
        model.set_experts_implementation(SAFE_EXPERTS)
    except (AttributeError, ValueError, NotImplementedError):
        return None, hazards
    after = redetect()
    if len([h for h in after if _in_moe(h)]) >= len(before):  # these experts ignore the switch
        model.set_experts_implementation(current)
        return None, hazards
    return (
        f"MoE experts ({current}) had a {before[0].kind} hazard at {before[0].location}: switched to HF's "
        f"{SAFE_EXPERTS} experts implementation, which reads no routing data on the host"
    ), after


def hoist_host_constants(
    session: DecodeSession, hazards: list[Hazard], redetect: Callable[[], list[Hazard]]
) -> tuple[str | None, list[Hazard]]:
    """Serve constants built on the host (tensors from Python data, small CPU tensors moved to the device)
    from a cache made outside the capture, when such hazards exist; kept only if it removed some.
    Returns (what was done or None, the hazards now)."""
    kinds = ("host-data", "device-copy")
    before = [h for h in hazards if h.kind in kinds]
    if not before or session.host_constants is not None:
        return None, hazards
    session.host_constants = HostConstants()
    after = redetect()
    if len([h for h in after if h.kind in kinds]) >= len(before):  # the data changes every step
        session.host_constants = None
        return None, hazards
    what = (
        "a tensor built from constant Python data"
        if before[0].kind == "host-data"
        else "a constant copied to the device"
    )
    return (
        f"{what} at {before[0].location} (a host-to-device copy): made once outside the graph and reused, "
        "as its value is the same every step"
    ), after
