"""Graph backends: real CUDA graphs on a GPU, an emulation with the same semantics elsewhere."""

from __future__ import annotations

import torch

from .base import CapturedGraph, CaptureStats, GraphBackend, Step
from .emulated import EmulatedBackend


def backend_for(device: torch.device, emulate: bool = False) -> GraphBackend:
    """CUDA graphs on a CUDA device unless emulation is asked for; emulation everywhere else."""
    if device.type == "cuda" and not emulate:
        from .cuda import CudaGraphBackend

        return CudaGraphBackend(device)
    return EmulatedBackend()


__all__ = ["CapturedGraph", "CaptureStats", "EmulatedBackend", "GraphBackend", "Step", "backend_for"]
