"""Graph backends: real CUDA graphs on a GPU, an emulation with the same semantics elsewhere."""

from __future__ import annotations

import torch

from accelerate_graph.core.backends.base import CapturedGraph, CaptureStats, GraphBackend, Step
from accelerate_graph.core.backends.emulated import EmulatedBackend


def backend_for(device: torch.device, emulate: bool = False) -> GraphBackend:
    """CUDA graphs on a CUDA device unless emulation is asked for; emulation everywhere else."""
    if device.type == "cuda" and not emulate:
        from accelerate_graph.core.backends.cuda import CudaGraphBackend

        return CudaGraphBackend(device)
    return EmulatedBackend()


__all__ = ["CapturedGraph", "CaptureStats", "EmulatedBackend", "GraphBackend", "Step", "backend_for"]
