"""The step's LM head at batch 1 on the skinny kernels (kernels/skinny_matmul.norm_projections, one weight,
no norm) instead of cuBLAS. cuBLAS's GEMV is at the bandwidth already (the 1B's 525 MB head in 119 us, ~4.4
TB/s: H200, docs/PERF.md stop 29); beside that it costs the gaps around it (rms_norm -> memset -> the head:
~4 us idle at the 1B's batch 1, the same stop). The skinny op needs no memset and launches with PDL
(fused/kernels/pdl.py); since stop 33 so does the final norm's kernel before it (rms_norm_kernel), which lets
the head launch and ask L2 for its first block while the norm runs.

On by default only for the head shapes where a replayed step measured it faster (HEAD_WINS_AT_BATCH_1):
the 1B's 128,256 x 2,048 head (H200, 2026-12-02, stop 31: timing_gap.py at 16,384, bucket 1 alone, 0.818 ->
0.811 ms in stop 30, 0.828 -> 0.819 ms of span today; its sweep kept the heuristic's config, 124 us against
cuBLAS's 132 alone). Qwen2.5-0.5B's 151,936 x 896 head lost (0.629 -> 0.631 ms of span, though its kernel
alone beat cuBLAS's, 69 against 73 us): it keeps cuBLAS, and so does every head not measured (the 8B's among
them). CUGRAPH_ACCEL_LM_HEAD_KERNEL: "auto" (default), "1" every plain head, "0" none. Only where the layer
program runs every layer (the skinny kernels' path), for a plain nn.Linear head (bias or not)."""

from __future__ import annotations

import os

import torch

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.fused.kernels.skinny_matmul import WEIGHT_ELEMENTS_LIMIT, norm_projections

# (vocabulary, hidden): heads whose batch-1 step replayed faster on the skinny kernel than on cuBLAS (H200)
HEAD_WINS_AT_BATCH_1: frozenset[tuple[int, int]] = frozenset({(128256, 2048)})


def switch(text: str) -> str:
    """CUGRAPH_ACCEL_LM_HEAD_KERNEL's value checked: "auto", "1" or "0"."""
    if text not in ("auto", "1", "0"):
        raise BadOptionError(
            f"CUGRAPH_ACCEL_LM_HEAD_KERNEL={text!r} is not a setting of the LM head kernel.",
            "Set it to auto (the measured head shapes), 1 (every plain head) or 0 (cuBLAS's head), or unset it.",
        )
    return text


LM_HEAD_KERNEL = switch(os.environ.get("CUGRAPH_ACCEL_LM_HEAD_KERNEL", "auto"))


def wanted(head: torch.nn.Linear) -> bool:
    """Does the switch put this head on the skinny kernel?"""
    if LM_HEAD_KERNEL == "auto":
        return tuple(head.weight.shape) in HEAD_WINS_AT_BATCH_1
    return LM_HEAD_KERNEL == "1"


def lm_head_kernel(model: torch.nn.Module) -> dict[torch.nn.Module, object]:
    """{LM head: forward} running one-row calls on the skinny kernels, for torch_internals.forwards_replaced;
    {} where the switch does not want the head, or the head is not a plain nn.Linear."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or not wanted(head):
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
