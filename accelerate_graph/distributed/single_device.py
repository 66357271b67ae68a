"""Tensor-parallel replay against one device running the whole model with the same weights.

Replay vs tensor-parallel eager proves the graphs; this proves the split: the same prompt and tokens
through the graphs on every rank, and through the unsplit model on rank 0 alone (loaded again, the
same recipe seed or the same files). The judge is verify's own criterion: the tensor-parallel replay,
measured against the unsplit model's float32 reference, may be no further from it than the unsplit
model's own eager step is (docs/VERIFY.md).
"""

from __future__ import annotations

from functools import partial

import torch

from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession, draw_inputs
from accelerate_graph.core.plan import Plan
from accelerate_graph.distributed.rank import barrier, is_main_rank
from accelerate_graph.models.loading import load_model
from accelerate_graph.verify.against_eager import VerifyRow
from accelerate_graph.verify.criterion import judge_tensors
from accelerate_graph.verify.reference import eager_step, float32_reference


def _decode(session: DecodeSession, step, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits [steps, rows, vocab] of `step(tokens, positions)` from a fresh prefill."""
    session.kv.reset()
    session.prefill(prompt)
    logits = []
    for i, step_tokens in enumerate(tokens):
        positions = torch.full((prompt.shape[0],), prompt.shape[1] + i, device=session.device)
        logits.append(step(step_tokens.to(session.device), positions).float().cpu().clone())
    session.kv.reset()
    return torch.stack(logits)


def _single_device_logits(graphs: DecodeGraphs, plan: Plan, prompt, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """The unsplit model's eager logits and its float32 reference's, for the same inputs."""
    session = graphs.session
    attn = "sdpa" if plan.attn == "grouped" else plan.attn  # HF's own attention: the reference
    whole = load_model(plan.model, session.device, session.model.dtype, attn, plan.revision)
    single = DecodeSession(whole.model, prompt.shape[0], session.max_cache_len)
    try:
        eager = _decode(single, partial(eager_step, single), prompt, tokens)
        with float32_reference(single):
            reference = _decode(single, partial(eager_step, single), prompt, tokens)
        return eager, reference
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
    replayed = _decode(session, graphs.run, prompt, tokens)
    row = None
    if is_main_rank():
        eager, reference = _single_device_logits(graphs, plan, prompt, tokens)
        judged = judge_tensors((replayed, eager, reference), ([], [], []), session.model.dtype)
        slots = f"{prompt_len}-{prompt_len + steps - 1}"
        measures = {
            f: getattr(judged, f)
            for f in ("logit_err", "eager_err", "ratio", "kl", "eager_kl", "drift", "top1", "eager_top1")
        }
        row = VerifyRow(
            bucket,
            bucket,
            steps,
            slots,
            judged.passed,
            judged.detail,
            **measures,
            max_abs=(replayed - eager).abs().max().item(),
            reference="float32, unsplit model",
        )
    barrier()  # the other ranks wait here while rank 0 runs the whole model
    return row
