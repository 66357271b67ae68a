"""Fixes that keep a decode step whole instead of cutting it into pieces, each applied only where needed."""

from __future__ import annotations

import torch

from .hazards import Hazard

SAFE_EXPERTS = "batched_mm"  # HF's experts implementation that gathers weights per token: no host reads


def _in_moe(hazard: Hazard) -> bool:
    text = f"{hazard.module_path} {hazard.module_class}".lower()
    return "expert" in text or "moe" in text


def use_capture_safe_experts(model: torch.nn.Module, hazards: list[Hazard]) -> str | None:
    """Switch MoE experts to `batched_mm` when hazards sit in MoE blocks; returns what was done."""
    current = getattr(model.config, "_experts_implementation", None)
    if current in (None, SAFE_EXPERTS) or not any(_in_moe(h) for h in hazards):
        return None
    try:
        model.set_experts_implementation(SAFE_EXPERTS)
    except (AttributeError, ValueError, NotImplementedError):
        return None
    first = next(h for h in hazards if _in_moe(h))
    return (f"MoE experts ({current}) had a {first.kind} hazard at {first.location}: switched to HF's "
            f"{SAFE_EXPERTS} experts implementation, which reads no routing data on the host")
