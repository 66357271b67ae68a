"""Constants built on the host (tensors from Python data, small CPU tensors moved to the device) served
from a cache made outside the capture (core/host_constants.py), when their value is the same every step."""

from __future__ import annotations

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.host_constants import HostConstants
from accelerate_graph.detect.fixes.base import ModelFix, Redetect
from accelerate_graph.detect.hazards import Hazard


def hoist_host_constants(
    session: DecodeSession, hazards: list[Hazard], redetect: Redetect
) -> tuple[str | None, list[Hazard]]:
    """Serve constants built on the host from a cache made outside the capture, when such hazards exist;
    kept only if it removed some. Returns (what was done or None, the hazards now)."""
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


HOIST_HOST_CONSTANTS = ModelFix("hoist-host-constants", hoist_host_constants)
