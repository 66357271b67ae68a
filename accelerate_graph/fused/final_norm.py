"""The step's final RMSNorm as one kernel (kernels/skinny_matmul.rms_norm) instead of HF's ~7 eager ones
(to float32, pow, mean, add, rsqrt, multiply, cast, weight: H200 profile of Llama-3.2-1B at batch 1,
docs/PERF.md stop 20).

Only where the layer program runs every layer (fused/layer_program.py): there the layers' norms are
Llama's kind, folded into the skinny kernels with the same rstd and roundings, and the final norm must be
of the same class as theirs. On since measured (H200, 2026-12-01, docs/PERF.md stop 21: the 1B's batch 1
0.872 -> 0.858 ms, Qwen's 0.736 -> 0.725); CUGRAPH_ACCEL_FINAL_NORM_KERNEL=0 keeps HF's norm. Launched with PDL
where PDL is active (kernels/skinny_matmul.FINAL_NORM_PDL; stop 33: the 1B's batch 1 -1 us, Qwen's unchanged)."""

from __future__ import annotations

import os

import torch

from accelerate_graph.compat.transformers_internals import final_norm_module
from accelerate_graph.fused.kernels.skinny_matmul import rms_norm

FINAL_NORM_KERNEL = os.environ.get("CUGRAPH_ACCEL_FINAL_NORM_KERNEL", "1") == "1"


def final_norm_kernel(model: torch.nn.Module, layer_norm: torch.nn.Module) -> dict[torch.nn.Module, object]:
    """{final norm: forward} where the model's final norm is a `layer_norm`'s class (an RMSNorm the layer
    program takes), for torch_internals.forwards_replaced; {} otherwise or with the switch off."""
    norm = final_norm_module(model)
    if not FINAL_NORM_KERNEL or norm is None or type(norm) is not type(layer_norm):
        return {}

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype != norm.weight.dtype:  # HF would promote: its own forward
            return type(norm).forward(norm, hidden_states)
        return rms_norm(hidden_states, norm.weight, norm.variance_epsilon)

    return {norm: forward}
