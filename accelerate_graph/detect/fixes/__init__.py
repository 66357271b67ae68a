"""Model fixes: changes that keep a decode step whole instead of cutting it into graph segments, each
applied only where the hazards found call for it. One file per fix; `MODEL_FIXES` lists them in the
order `capture_flow.decide_regions` applies them, each to the hazards the one before it left."""

from __future__ import annotations

from accelerate_graph.detect.fixes.base import ModelFix, Redetect
from accelerate_graph.detect.fixes.host_constants import HOIST_HOST_CONSTANTS
from accelerate_graph.detect.fixes.moe_experts import CAPTURE_SAFE_EXPERTS
from accelerate_graph.detect.fixes.sliding_cache_layers import SLIDING_CACHE_LAYERS

MODEL_FIXES: tuple[ModelFix, ...] = (
    SLIDING_CACHE_LAYERS,
    HOIST_HOST_CONSTANTS,
    CAPTURE_SAFE_EXPERTS,
)

__all__ = ["MODEL_FIXES", "ModelFix", "Redetect"]
