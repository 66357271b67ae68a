"""Prove replay == eager: the same decode steps from the same cache state, logits and cache compared.

For each bucket: a full batch, and the smallest batch padded up to it; with context buckets, also
a run across each boundary between them (the step moves to the next graph mid-run). The eager
reference runs only the real rows over the whole cache, so a pass also proves padding rows change
nothing in real rows and a context bucket's shorter attention misses nothing. Inputs are
drawn up front (teacher forcing): near-uniform logits of random weights would make greedy tokens
diverge between two numerically equivalent runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from accelerate_graph.core.buckets import padded_batch
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import draw_inputs

# Relative tolerance per dtype; the absolute tolerance is the same fraction of the largest eager
# value, because one rounding difference in a hidden state moves every logit by about the same
# amount, near zero too. A padded batch runs other matmul shapes than its eager reference, and bf16
# eager runs on the H200 were seen to differ from each other by ~2 ulps (docs/PERF.md), so the
# budget is a few ulps; real bugs (a frozen value, a wrong cache slot) move logits by their own scale.
RTOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def tolerance(dtype: torch.dtype, expected: torch.Tensor) -> tuple[float, float]:
    """(rtol, atol) for comparing against `expected`."""
    rtol = RTOL.get(dtype, 1e-4)
    return rtol, rtol * max(expected.abs().max().item(), 1e-6)


@dataclass
class VerifyRow:
    bucket: int
    batch: int
    steps: int
    max_abs: float  # worst |replay - eager| over all steps
    max_rel: float  # worst max|replay - eager| / max|eager| of one step
    rtol: float
    atol: float  # of the step with the largest logits
    cache_max_abs: float
    eager_noise_abs: float  # worst |eager - eager| of two identical eager runs: the reference's own noise
    passed: bool
    detail: str = ""  # where and how it failed
    slots: str = ""  # the cache slots the steps wrote, e.g. "16-23"


def _compare(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> str:
    rtol, atol = tolerance(dtype, expected.float())
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
        return ""
    except AssertionError as err:
        return " ".join(str(err).split())


def verify_batch(
    graphs: DecodeGraphs, bucket: int, batch: int, steps: int, prompt_len: int, seed: int = 0
) -> VerifyRow:
    session = graphs.session
    if prompt_len + steps > session.max_cache_len:
        steps = session.max_cache_len - prompt_len
    prompt, tokens = draw_inputs(batch, steps, prompt_len, session.vocab_size, seed + 1000 * bucket + batch)
    tokens = tokens.to(session.device)
    dtype = session.model.dtype

    session.kv.reset()
    session.prefill(prompt)
    start = session.kv.snapshot(bucket, prompt_len, steps)  # only what the steps overwrite

    def run(step_once: Callable) -> tuple[list[torch.Tensor], list]:
        logits = []
        for i in range(steps):
            positions = torch.full((batch,), prompt_len + i, device=session.device)
            logits.append(step_once(tokens[i], positions).float().clone())
        return logits, session.kv.snapshot(batch, prompt_len, steps)

    eager_logits, eager_cache = run(graphs.eager)
    session.kv.restore(start)
    again_logits, _ = run(graphs.eager)
    session.kv.restore(start)
    replay_logits, replay_cache = run(graphs.run)

    noise = max((a - b).abs().max().item() for a, b in zip(again_logits, eager_logits))
    max_abs = max_rel = 0.0
    detail = ""
    for i, (replayed, expected) in enumerate(zip(replay_logits, eager_logits)):
        diff = (replayed - expected).abs().max().item()
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / max(expected.abs().max().item(), 1e-12))
        if not detail and (problem := _compare(replayed, expected, dtype)):
            detail = f"logits differ at step {i + 1}: {problem}"
    rtol, atol = tolerance(dtype, torch.stack(eager_logits))
    cache_abs = 0.0
    for layer, ((rk, rv, rpos), (ek, ev, epos)) in enumerate(zip(replay_cache, eager_cache)):
        cache_abs = max(
            cache_abs, (rk.float() - ek.float()).abs().max().item(), (rv.float() - ev.float()).abs().max().item()
        )
        if not detail and not torch.equal(rpos, epos):
            detail = f"cache layer {layer} write position {rpos.item()} after replay, {epos.item()} after eager"
        if not detail and (problem := _compare(rk, ek, dtype) or _compare(rv, ev, dtype)):
            detail = f"cache layer {layer} differs after {steps} steps: {problem}"
    session.kv.reset()
    slots = f"{prompt_len}-{prompt_len + steps - 1}"
    return VerifyRow(bucket, batch, steps, max_abs, max_rel, rtol, atol, cache_abs, noise, not detail, detail, slots)


def verify_graphs(
    graphs: DecodeGraphs,
    steps: int = 8,
    prompt_len: int = 16,
    seed: int = 0,
    on_row: Callable[[VerifyRow], None] | None = None,
) -> list[VerifyRow]:
    """Every bucket at full size and at its most-padded size; then the largest bucket across each
    context-bucket boundary."""
    runs = [
        (bucket, batch, prompt_len)
        for bucket in graphs.buckets
        for batch in (bucket, padded_batch(bucket, graphs.buckets))
        if batch is not None
    ]
    largest = graphs.buckets[-1] if graphs.buckets else None
    runs += [(largest, largest, max(boundary - steps // 2, 1)) for boundary in graphs.contexts[:-1]]
    rows = []
    for bucket, batch, start in runs:
        row = verify_batch(graphs, bucket, batch, steps, start, seed)
        rows.append(row)
        if on_row:
            on_row(row)
    return rows
