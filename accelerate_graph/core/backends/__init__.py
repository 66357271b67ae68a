"""Graph backends, chosen by name: real CUDA graphs on a GPU ("cuda-graph"), and an emulation with the
same semantics anywhere ("emulated"). A backend captures a zero-argument step and replays it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph.core.backends.base import CapturedGraph, CaptureStats, GraphBackend, Step
from accelerate_graph.core.backends.emulated import EmulatedBackend


def _cuda_graphs(device: torch.device) -> GraphBackend:
    from accelerate_graph.core.backends.cuda import CudaGraphBackend  # imported only where CUDA runs

    return CudaGraphBackend(device)


# name -> factory(device). The name is what a plan records as its `backend`.
BACKENDS: dict[str, Callable[[torch.device], GraphBackend]] = {
    "cuda-graph": _cuda_graphs,
    "emulated": lambda device: EmulatedBackend(),
}


def backend_named(name: str, device: torch.device) -> GraphBackend:
    if name not in BACKENDS:
        raise ValueError(f"no graph backend named {name!r} (known: {', '.join(BACKENDS)})")
    return BACKENDS[name](device)


def backend_for(device: torch.device, emulate: bool = False) -> GraphBackend:
    """CUDA graphs on a CUDA device unless emulation is asked for; emulation everywhere else."""
    return backend_named("cuda-graph" if device.type == "cuda" and not emulate else "emulated", device)


__all__ = [
    "BACKENDS",
    "CapturedGraph",
    "CaptureStats",
    "EmulatedBackend",
    "GraphBackend",
    "Step",
    "backend_for",
    "backend_named",
]
