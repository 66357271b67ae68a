"""The step's LM head at batch 1 on the skinny kernels (kernels/skinny_matmul.norm_projections, one weight,
no norm) instead of cuBLAS. cuBLAS's GEMV is at the bandwidth already (the 1B's 525 MB head in 119 us, ~4.4
TB/s: H200, docs/PERF.md stop 29); beside that it costs the gaps around it (rms_norm -> memset -> the head:
~4 us idle at the 1B's batch 1, the same stop). The skinny op needs no memset and launches with PDL
(fused/kernels/pdl.py); the final norm's kernel (rms_norm_kernel) takes no part in PDL, so the head overlaps
it only by its launch and its first block's prefetch.

A measurement switch, off: CUGRAPH_ACCEL_LM_HEAD_KERNEL=1. Only where the layer program runs every layer (the
skinny kernels' path), for a plain nn.Linear head (bias or not). Stop 30 (H200, timing_gap.py, the 1B at
16,384, bucket 1 alone): 0.818 -> 0.811 ms (predicted -2..-4 us); its GPU test passed; not yet verified on the
real-size recipes with it on, and its sweep (benchmarks/lm_head_gpu.sh) not yet run."""

from __future__ import annotations

import os

import torch

from accelerate_graph.fused.kernels.skinny_matmul import WEIGHT_ELEMENTS_LIMIT, norm_projections

LM_HEAD_KERNEL = os.environ.get("CUGRAPH_ACCEL_LM_HEAD_KERNEL", "0") == "1"


def lm_head_kernel(model: torch.nn.Module) -> dict[torch.nn.Module, object]:
    """{LM head: forward} running one-row calls on the skinny kernels, for torch_internals.forwards_replaced;
    {} with the switch off or where the head is not a plain nn.Linear."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not LM_HEAD_KERNEL or type(head) is not torch.nn.Linear:
        return {}
    if type(head.weight.data) is not torch.Tensor:  # a tensor-parallel DTensor shard: nn.Linear's own path
        return {}
    if head.weight.numel() >= WEIGHT_ELEMENTS_LIMIT or "forward" in vars(head):  # the op would refuse; a hook's forward
        return {}

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        rows = hidden_states.numel() // hidden_states.shape[-1]
        if rows != 1 or hidden_states.dtype != head.weight.dtype:  # more rows: cuBLAS; HF would promote
            return torch.nn.Linear.forward(head, hidden_states)
        return norm_projections(hidden_states, None, 0.0, "llama", [head.weight], [head.bias])[0]

    return {head: forward}
