"""Prove a replay is as right as eager execution: the same decode steps from the same cache state, run
three ways (replay, eager, and a float32 reference), and replay judged by how far it is from the
reference compared with how far eager is (verify/criterion.py; the reasoning: docs/VERIFY.md).

For each bucket: a full batch, and the smallest batch padded up to it; with context buckets, also
a run across each boundary between them (the step moves to the next graph mid-run). The eager
reference runs only the real rows over the whole cache, so a pass also proves padding rows change
nothing in real rows and a context bucket's shorter attention misses nothing. Inputs are
drawn up front (teacher forcing): near-uniform logits of random weights would make greedy tokens
diverge between two numerically equivalent runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from accelerate_graph.core.buckets import padded_batch
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession, draw_inputs
from accelerate_graph.verify.criterion import Judgement, judge_case, tolerance_for
from accelerate_graph.verify.reference import eager_step, float32_reference, reference_step
from accelerate_graph.verify.routers import RouterLog, compare_routers, find_routers, recording


@dataclass
class VerifyRow:
    """One case (a batch in a bucket, from a start slot, for some steps) and its verdict; the measures
    are those of `criterion.Judgement`."""

    bucket: int
    batch: int
    steps: int
    slots: str  # the cache slots the steps wrote, e.g. "16-23"
    passed: bool
    detail: str  # the rules it broke, in words
    logit_err: float = 0.0
    eager_err: float = 0.0
    ratio: float = 0.0
    kl: float = 0.0
    eager_kl: float = 0.0
    drift: float = 0.0
    top1: float = 1.0
    eager_top1: float = 1.0
    cache_err: float = 0.0
    eager_cache_err: float = 0.0
    router_flips: int = 0
    router_accepted: int = 0
    router_rejected: int = 0
    eager_router_flips: int = 0
    eager_router_accepted: int = 0
    max_abs: float = 0.0  # worst |replay - eager| logit: informational, judged by none of the rules
    has_routers: bool = False
    reference: str = "float32"  # what the runs were measured against


def written(session: DecodeSession, rows: int, first: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of the K/V a run of `steps` steps from slot `first` wrote into rows [:rows], per layer."""
    window = slice(first, first + steps)
    return [
        (layer.keys[:rows, :, window].clone(), layer.values[:rows, :, window].clone()) for layer in session.kv.layers
    ]


@dataclass
class Run:
    logits: torch.Tensor  # [steps, rows, vocab], float32
    cache: list  # written K/V per layer
    positions: list[int]  # each layer's write position afterwards
    routers: RouterLog | None = None


def _run(session: DecodeSession, step_once: Callable, tokens: torch.Tensor, first: int, routers) -> Run:
    batch, logits = tokens.shape[1], []
    with recording(session.model, routers) as log:
        for i in range(tokens.shape[0]):
            positions = torch.full((batch,), first + i, device=session.device)
            logits.append(step_once(session, tokens[i], positions))
    positions = [int(p.item()) for p in session.kv.positions()]
    return Run(torch.stack(logits), written(session, batch, first, tokens.shape[0]), positions, log)


def run_case(graphs: DecodeGraphs, bucket: int, tokens: torch.Tensor, first: int) -> tuple[Run, Run, Run]:
    """Replay, eager and float32 reference runs of the same steps from the same cache state (restored
    between them: only the rows and slots the steps overwrite are copied)."""
    session = graphs.session
    routers = find_routers(session.model)
    start = session.kv.snapshot(bucket, first, tokens.shape[0])

    def eager(s, t, p):
        return eager_step(s, t, p).float().clone()

    def replay(s, t, p):
        return graphs.run(t, p).float()

    eager_run = _run(session, eager, tokens, first, routers)
    reference_run = eager_run
    if session.model.dtype != torch.float32:
        session.kv.restore(start)
        with float32_reference(session):
            reference_run = _run(session, lambda s, t, p: reference_step(s, t, p).clone(), tokens, first, routers)
    session.kv.restore(start)
    replay_run = _run(session, replay, tokens, first, [])
    return replay_run, eager_run, reference_run


def judge_runs(replay: Run, eager: Run, reference: Run, dtype: torch.dtype) -> Judgement:
    """How one case is judged (criterion.judge_case), plus the exact check of the write positions."""
    routers = None
    if reference.routers is not None and reference.routers.routers:
        routers = compare_routers(reference.routers, eager.routers, tolerance_for(dtype).factor, dtype)
    judgement = judge_case(
        (replay.logits, eager.logits, reference.logits), (replay.cache, eager.cache, reference.cache), dtype, routers
    )
    for layer, (got, want) in enumerate(zip(replay.positions, eager.positions)):
        if got != want:
            problem = f"cache layer {layer} write position {got} after replay, {want} after eager"
            judgement.failures.insert(0, problem)
            judgement.passed, judgement.detail = False, problem
            break
    return judgement


def verify_batch(
    graphs: DecodeGraphs, bucket: int, batch: int, steps: int, prompt_len: int, seed: int = 0
) -> VerifyRow:
    """Judge one case: `batch` rows in `bucket`'s graphs, `steps` steps after a prompt of `prompt_len`."""
    session = graphs.session
    if prompt_len + steps > session.max_cache_len:
        steps = session.max_cache_len - prompt_len
    prompt, tokens = draw_inputs(batch, steps, prompt_len, session.vocab_size, seed + 1000 * bucket + batch)
    session.kv.reset()
    session.prefill(prompt)
    replay, eager, reference = run_case(graphs, bucket, tokens.to(session.device), prompt_len)
    session.kv.reset()
    dtype = session.model.dtype
    judgement = judge_runs(replay, eager, reference, dtype)
    measures = {f.name: getattr(judgement, f.name) for f in fields(VerifyRow) if hasattr(judgement, f.name)}
    measures.pop("passed")
    measures.pop("detail")
    return VerifyRow(
        bucket,
        batch,
        steps,
        f"{prompt_len}-{prompt_len + steps - 1}",
        judgement.passed,
        judgement.detail,
        **measures,
        max_abs=(replay.logits - eager.logits).abs().max().item(),
        has_routers=reference.routers is not None and bool(reference.routers.routers),
        reference="float32" if dtype != torch.float32 else "the model (float32)",
    )


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
