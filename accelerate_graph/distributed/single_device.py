"""Tensor-parallel replay against one device running the whole model with the same weights.

Replay vs tensor-parallel eager proves the graphs; this proves the split: the same prompt and tokens
through the graphs on every rank, and through the unsplit model on rank 0 alone (loaded again, the
same recipe seed or the same files), compared with verify's own tolerance.
"""

from __future__ import annotations

import torch

from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession, draw_inputs
from accelerate_graph.core.plan import Plan
from accelerate_graph.distributed.rank import barrier, is_main_rank
from accelerate_graph.models.loading import load_model
from accelerate_graph.verify.against_eager import VerifyRow, _compare, tolerance


def _decode(
    graphs: DecodeGraphs, prompt: torch.Tensor, tokens: torch.Tensor, eager: bool = False
) -> list[torch.Tensor]:
    session = graphs.session
    step = graphs.eager if eager else graphs.run
    session.kv.reset()
    session.prefill(prompt)
    logits = []
    for i, step_tokens in enumerate(tokens):
        positions = torch.full((prompt.shape[0],), prompt.shape[1] + i, device=session.device)
        logits.append(step(step_tokens.to(session.device), positions).float().cpu().clone())
    session.kv.reset()
    return logits


def _single_device_logits(graphs: DecodeGraphs, plan: Plan, prompt, tokens) -> list[torch.Tensor]:
    session = graphs.session
    attn = "sdpa" if plan.attn == "grouped" else plan.attn  # HF's own attention: the reference
    whole = load_model(plan.model, session.device, session.model.dtype, attn, plan.revision)
    single = DecodeSession(whole.model, prompt.shape[0], session.max_cache_len)
    try:
        return _decode(DecodeGraphs(single, {}), prompt, tokens, eager=True)  # HF's own step
    finally:
        del single, whole
        if session.device.type == "cuda":
            torch.cuda.empty_cache()


def against_single_device(graphs: DecodeGraphs, plan: Plan, steps: int) -> VerifyRow | None:
    """Every rank replays; rank 0 compares with the unsplit model and returns the row (None elsewhere)."""
    session, prompt_len = graphs.session, plan.prompt_len
    bucket = graphs.buckets[-1]
    steps = max(min(steps, session.max_cache_len - prompt_len), 1)
    prompt, tokens = draw_inputs(bucket, steps, prompt_len, session.vocab_size, seed=17)
    replayed = _decode(graphs, prompt, tokens)
    row = None
    if is_main_rank():
        expected = _single_device_logits(graphs, plan, prompt, tokens)
        dtype = session.model.dtype
        rtol, atol = tolerance(dtype, torch.stack(expected))
        diffs = [(a - b).abs().max().item() for a, b in zip(replayed, expected)]
        scale = max(max(e.abs().max().item() for e in expected), 1e-12)
        problems = (_compare(a, b, dtype) for a, b in zip(replayed, expected))
        detail = next((f"logits differ at step {i + 1}: {p}" for i, p in enumerate(problems) if p), "")
        slots = f"{prompt_len}-{prompt_len + steps - 1}"
        worst = max(diffs)
        row = VerifyRow(bucket, bucket, steps, worst, worst / scale, rtol, atol, 0.0, 0.0, not detail, detail, slots)
    barrier()  # the other ranks wait here while rank 0 runs the whole model
    return row
