"""The step's final RMSNorm as one kernel (kernels/skinny_matmul.rms_norm) instead of HF's ~7 eager ones
(to float32, pow, mean, add, rsqrt, multiply, cast, weight), launched with PDL where PDL is active.

Only where the layer program runs every layer (fused/layer_program.py): there the layers' norms are
Llama's kind, folded into the skinny kernels with the same rstd and roundings, and the final norm must be
of the same class as theirs. Setting `final_norm_kernel` (on) chooses it; off keeps HF's norm."""

from __future__ import annotations

import torch

from accelerate_graph.compat.transformers_internals import final_norm_module
from accelerate_graph.fused.kernels.skinny_matmul import rms_norm
from accelerate_graph.settings import Settings, current


def final_norm_kernel(
    model: torch.nn.Module, layer_norm: torch.nn.Module, settings: Settings | None = None
) -> dict[torch.nn.Module, object]:
    """{final norm: forward} where the model's final norm is a `layer_norm`'s class (an RMSNorm the layer
    program takes), for torch_internals.forwards_replaced; {} otherwise or with `final_norm_kernel` off in
    `settings` (None: settings.current())."""
    settings = settings if settings is not None else current()
    norm = final_norm_module(model)
    if not settings.final_norm_kernel or norm is None or type(norm) is not type(layer_norm):
        return {}

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype != norm.weight.dtype:  # HF would promote: its own forward
            return type(norm).forward(norm, hidden_states)
        return rms_norm(hidden_states, norm.weight, norm.variance_epsilon)

    return {norm: forward}
