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
from accelerate_graph.verify.against_eager import VerifyRow
from accelerate_graph.verify.reference import eager_step

# The split is checked against the unsplit model with the rtol rule verify used before its float32
# reference (docs/VERIFY.md): a tensor-parallel step and a whole one both run in the model's dtype.
RTOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def tolerance(dtype: torch.dtype, expected: torch.Tensor) -> tuple[float, float]:
    rtol = RTOL.get(dtype, 1e-4)
    return rtol, rtol * max(expected.abs().max().item(), 1e-6)


def _compare(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> str:
    rtol, atol = tolerance(dtype, expected.float())
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
        return ""
    except AssertionError as err:
        return " ".join(str(err).split())


def _decode(
    graphs: DecodeGraphs, prompt: torch.Tensor, tokens: torch.Tensor, eager: bool = False
) -> list[torch.Tensor]:
    session = graphs.session
    step = (lambda t, p: eager_step(session, t, p)) if eager else graphs.run
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
        row = VerifyRow(bucket, bucket, steps, slots, not detail, detail, max_abs=worst, ratio=worst / scale / rtol)
    barrier()  # the other ranks wait here while rank 0 runs the whole model
    return row
