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

from accelerate_graph.common.errors import is_out_of_memory
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import draw_inputs
from accelerate_graph.core.static_cache import CacheSnapshot
from accelerate_graph.verify.cases import Case, CasePlan, plan_cases

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
    context: int = 0  # the context bucket of the first step (0: not known)


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
    """One batch from its own prompt of `prompt_len` tokens (the check `capture` runs)."""
    session = graphs.session
    if prompt_len + steps > session.max_cache_len:
        steps = session.max_cache_len - prompt_len
    prompt, tokens = draw_inputs(batch, steps, prompt_len, session.vocab_size, seed + 1000 * bucket + batch)
    session.kv.reset()
    session.prefill(prompt)
    start = session.kv.snapshot(bucket, prompt_len, steps)  # only what the steps overwrite
    row = judge_case(graphs, bucket, batch, tokens.to(session.device), prompt_len, start)
    session.kv.reset()
    return row


def judge_case(
    graphs: DecodeGraphs, bucket: int, batch: int, tokens: torch.Tensor, start_slot: int, start: CacheSnapshot
) -> VerifyRow:
    """Replay vs eager for the teacher-forced `tokens` [steps, batch], each run from the cache state
    `start` (whose next write slot is `start_slot`)."""
    session = graphs.session
    steps = tokens.shape[0]
    dtype = session.model.dtype

    def run(step_once: Callable) -> tuple[list[torch.Tensor], list]:
        session.kv.restore(start)
        logits = []
        for i in range(steps):
            positions = torch.full((batch,), start_slot + i, device=session.device)
            logits.append(step_once(tokens[i], positions).float().clone())
        return logits, session.kv.snapshot(batch, start_slot, steps)

    eager_logits, eager_cache = run(graphs.eager)
    again_logits, _ = run(graphs.eager)
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
    slots = f"{start_slot}-{start_slot + steps - 1}"
    return VerifyRow(bucket, batch, steps, max_abs, max_rel, rtol, atol, cache_abs, noise, not detail, detail, slots)


def verify_graphs(
    graphs: DecodeGraphs,
    steps: int = 8,
    prompt_len: int = 16,
    seed: int = 0,
    on_row: Callable[[VerifyRow], None] | None = None,
    plan: CasePlan | None = None,
) -> list[VerifyRow]:
    """Every case of `plan` (default: `plan_cases` for these graphs: every graph at full and padded
    batch, and across each context boundary), all from one prefilled cache: each case copies only the
    rows and slots it writes, and puts them back after."""
    plan = plan or plan_cases(graphs.buckets, graphs.contexts, steps, prompt_len)
    session = graphs.session
    prompt = _draw(plan.rows, plan.prefill_len, session.vocab_size, seed)
    session.kv.reset()
    _prefill(session, prompt)
    rows = []
    for number, case in enumerate(plan.cases):
        tokens = _draw(case.steps, case.batch, session.vocab_size, seed + 1 + number).to(session.device)
        start = at_slot(session.kv.snapshot(case.bucket, case.start, case.steps), case.start)
        row = _judge_guarded(graphs, case, tokens, start)
        session.kv.restore(start)  # the prefilled state again, for the next case
        rows.append(row)
        if on_row:
            on_row(row)
    session.kv.reset()
    return rows


def _draw(rows: int, columns: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, columns), generator=torch.Generator().manual_seed(seed))


PREFILL_CHUNK = 256  # prompt tokens per forward: bounds the prefill's attention scores at long starts


def _prefill(session, prompt: torch.Tensor) -> None:
    """Run `prompt` [rows, P] into the cache from slot 0, in chunks."""
    rows, length = prompt.shape
    session.kv.rewind(0)
    with torch.no_grad():
        for first in range(0, length, PREFILL_CHUNK):
            chunk = prompt[:, first : first + PREFILL_CHUNK].to(session.device)
            positions = torch.arange(first, first + chunk.shape[1], device=session.device).expand(rows, -1)
            session.forward(rows, chunk, positions, session.attention_mask)
    session.kv.next_slot = length


def at_slot(snap: CacheSnapshot, slot: int) -> CacheSnapshot:
    """The same cache contents with the write position at `slot` (no copy of the K/V)."""
    moved = CacheSnapshot((keys, values, torch.full_like(position, slot)) for keys, values, position in snap)
    moved.next_slot = slot
    moved.first_slot = snap.first_slot
    return moved


def _judge_guarded(graphs: DecodeGraphs, case: Case, tokens: torch.Tensor, start: CacheSnapshot) -> VerifyRow:
    """`judge_case` for one case; a replay that raises (a graph of the wrong shape or context, say) is
    that case's failure, not the end of verify."""
    try:
        row = judge_case(graphs, case.bucket, case.batch, tokens, case.start, start)
    except (RuntimeError, IndexError) as err:
        if is_out_of_memory(err):
            raise
        problem = " ".join(str(err).split())[:300] or type(err).__name__
        nan = float("nan")
        rtol = RTOL.get(graphs.session.model.dtype, 1e-4)
        row = VerifyRow(case.bucket, case.batch, case.steps, nan, nan, rtol, nan, nan, nan, False, "", case.slots)
        row.detail = f"the step raised: {problem}"
    row.context = case.context
    return row
