"""The step's LM head at batch 1 on the skinny kernels (kernels/skinny_matmul.norm_projections, one weight,
no norm) instead of cuBLAS. cuBLAS's GEMV is at the bandwidth already (the 1B's 525 MB head in 119 us, ~4.4
TB/s on the H200); beside that it costs the gaps around it (rms_norm -> memset -> the head: ~4 us idle at
the 1B's batch 1). The skinny op needs no memset and launches with PDL (fused/kernels/pdl.py), as does the
final norm's kernel before it, which lets the head launch and ask L2 for its first block while the norm runs.

The lm_head_kernel setting: "auto" (the default) puts only the head shapes where a replayed step measured
it faster on it (HEAD_WINS_AT_BATCH_1: the 1B's 128,256 x 2,048 head, H200 2026-12-02, 0.828 -> 0.819 ms a
step; Qwen2.5-0.5B's 151,936 x 896 head lost, 0.629 -> 0.631 ms, and keeps cuBLAS, as does every head not
measured), "on" every plain head, "off" none. Only where the layer program runs every layer (the skinny
kernels' path), for a plain nn.Linear head (bias or not)."""

from __future__ import annotations

import torch

from accelerate_graph.fused.kernels.skinny_matmul import WEIGHT_ELEMENTS_LIMIT, norm_projections

# (vocabulary, hidden): heads whose batch-1 step replayed faster on the skinny kernel than on cuBLAS (H200)
HEAD_WINS_AT_BATCH_1: frozenset[tuple[int, int]] = frozenset({(128256, 2048)})


def wanted(head: torch.nn.Linear, setting: str) -> bool:
    """Does the lm_head_kernel setting (auto, on or off) put this head on the skinny kernel?"""
    if setting == "auto":
        return tuple(head.weight.shape) in HEAD_WINS_AT_BATCH_1
    return setting == "on"


def lm_head_kernel(model: torch.nn.Module, setting: str) -> dict[torch.nn.Module, object]:
    """{LM head: forward} running one-row calls on the skinny kernels, for torch_internals.forwards_replaced;
    {} where the lm_head_kernel setting does not want the head, or the head is not a plain nn.Linear."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or not wanted(head, setting):
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
