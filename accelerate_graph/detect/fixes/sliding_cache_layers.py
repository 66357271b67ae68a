"""Sliding-window cache layers replaced by full-length ones with a device-side write position.

The replacement itself happens where the cache is built (core/static_cache.py, before the first
forward allocates it); this fix reports it with the others, in every mode."""

from __future__ import annotations

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.detect.fixes.base import ModelFix, Redetect
from accelerate_graph.detect.hazards import Hazard


def report_unslid_layers(
    session: DecodeSession, hazards: list[Hazard], redetect: Redetect
) -> tuple[str | None, list[Hazard]]:
    return ("; ".join(session.kv.fixes) or None), hazards


SLIDING_CACHE_LAYERS = ModelFix("sliding-cache-layers", report_unslid_layers)
