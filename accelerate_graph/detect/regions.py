"""From hazards to a region plan: which submodules run as eager islands between graph segments."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from accelerate_graph.detect.hazards import Hazard

# An island holding more than this share of the weights leaves too little to graph: run eagerly.
MAX_ISLAND_WEIGHT_SHARE = 0.5


@dataclass
class RegionPlan:
    mode: str  # full | piecewise | eager
    islands: list[str]  # module paths that run eagerly, in model order
    regions: list[dict]  # what the plan file records and `capture` prints
    reason: str = ""


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths inside another path: an island already runs all of its children eagerly."""
    keep = []
    for path in sorted(set(paths), key=lambda p: (p.count("."), p)):
        if not any(path == outer or path.startswith(outer + ".") for outer in keep):
            keep.append(path)
    return keep


def _weight_share(model: torch.nn.Module, path: str) -> float:
    total = sum(p.numel() for p in model.parameters()) or 1
    module = model.get_submodule(path)
    return sum(p.numel() for p in module.parameters()) / total


def _model_order(model: torch.nn.Module, paths: list[str]) -> list[str]:
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    return sorted(paths, key=lambda p: order.get(p, 0))


def _reason(hazards: list[Hazard], path: str) -> str:
    inside = [h for h in hazards if h.module_path == path or h.module_path.startswith(path + ".")]
    first = inside[0]
    more = f" (+{len(inside) - 1} more)" if len(inside) > 1 else ""
    return f"{first.kind} at {first.location}: {first.detail}{more}"


def eager_plan(model: torch.nn.Module, reason: str) -> RegionPlan:
    """No graph at all: the whole step runs eagerly, for `reason`."""
    return RegionPlan(
        "eager", [], [{"path": "", "class": type(model).__name__, "run": "eager", "reason": reason}], reason=reason
    )


def plan_regions(model: torch.nn.Module, hazards: list[Hazard]) -> RegionPlan:
    root = {"path": "", "class": type(model).__name__}
    if not hazards:
        return RegionPlan("full", [], [{**root, "run": "graph", "reason": "whole decode step, no hazard found"}])
    islands = _model_order(model, _outermost([h.module_path for h in hazards]))
    blocking = [p for p in islands if p == "" or _weight_share(model, p) > MAX_ISLAND_WEIGHT_SHARE]
    if blocking:
        path = blocking[0]
        return eager_plan(
            model, f"hazard in {path or '<model>'}, which holds most of the model: {_reason(hazards, path)}"
        )
    regions = [
        {**root, "run": "graph", "reason": f"{len(islands) + 1} graph segments around {len(islands)} eager island(s)"}
    ]
    for path in islands:
        regions.append(
            {
                "path": path,
                "class": type(model.get_submodule(path)).__name__,
                "run": "eager",
                "reason": _reason(hazards, path),
            }
        )
    return RegionPlan("piecewise", islands, regions)
