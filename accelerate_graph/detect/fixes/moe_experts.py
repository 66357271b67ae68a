"""MoE experts switched to HF's `batched_mm` implementation, which reads no routing data on the host."""

from __future__ import annotations

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.detect.fixes.base import ModelFix, Redetect
from accelerate_graph.detect.hazards import Hazard

SAFE_EXPERTS = "batched_mm"  # HF's experts implementation that gathers weights per token: no host reads


def _in_moe(hazard: Hazard) -> bool:
    text = f"{hazard.module_path} {hazard.module_class}".lower()
    return "expert" in text or "moe" in text


def use_capture_safe_experts(
    session: DecodeSession, hazards: list[Hazard], redetect: Redetect
) -> tuple[str | None, list[Hazard]]:
    """Switch MoE experts to `batched_mm` when hazards sit in MoE blocks, and keep the switch only if
    it removed some of them. Returns (what was done or None, the hazards now)."""
    model = session.model
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


CAPTURE_SAFE_EXPERTS = ModelFix("capture-safe-experts", use_capture_safe_experts)
