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

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch

from accelerate_graph.common.errors import is_out_of_memory
from accelerate_graph.core.buckets import context_for
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession, draw_inputs
from accelerate_graph.core.static_cache import CacheSnapshot
from accelerate_graph.verify.cases import Case, CasePlan, plan_cases
from accelerate_graph.verify.criterion import Judgement, judge_tensors, tolerance_for
from accelerate_graph.verify.finite import GraphAt
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
    context: int = 0  # the context bucket of the first step (0: not known)


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


class PhaseClock:
    """Seconds spent in each phase of verify (prefill, eager, float32 reference, replay, judging), summed
    over the cases: where a long verify spends its time. A phase ends with a device sync, so its time
    includes its kernels (the runs sync anyway, reading the write positions back; the prefill does not)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str):
        began = time.perf_counter()
        try:
            yield
        finally:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.seconds[name] += time.perf_counter() - began

    def line(self) -> str:
        total = sum(self.seconds.values())
        parts = ", ".join(f"{name} {value:.1f} s" for name, value in self.seconds.items())
        return f"verify took {total:.1f} s: {parts}"


def run_case(
    graphs: DecodeGraphs, tokens: torch.Tensor, first: int, start: CacheSnapshot, clock: PhaseClock | None = None
) -> tuple[Run, Run, Run]:
    """Replay, eager and float32 reference runs of the teacher-forced `tokens` [steps, batch], each from
    the cache state `start` (whose next write slot is `first`)."""
    session = graphs.session
    routers = find_routers(session.model)
    clock = clock or PhaseClock()

    def eager(s, t, p):
        return eager_step(s, t, p).float().clone()

    def replay(s, t, p):
        return graphs.run(t, p).float()

    with clock.phase("eager"):
        session.kv.restore(start)
        eager_run = _run(session, eager, tokens, first, routers)
    reference_run = eager_run
    if session.model.dtype != torch.float32:
        with clock.phase("float32 reference"):
            session.kv.restore(start)
            with float32_reference(session):
                reference_run = _run(session, lambda s, t, p: reference_step(s, t, p).clone(), tokens, first, routers)
    with clock.phase("replay"):
        session.kv.restore(start)
        replay_run = _run(session, replay, tokens, first, [])
    return replay_run, eager_run, reference_run


def judge_runs(
    replay: Run, eager: Run, reference: Run, dtype: torch.dtype, graph_at: GraphAt | None = None
) -> Judgement:
    """How one case is judged (criterion.judge_case), plus the exact check of the write positions;
    `graph_at` names the graph that ran a step, for the lines about non-finite values."""
    routers = None
    if reference.routers is not None and reference.routers.routers:
        routers = compare_routers(reference.routers, eager.routers, tolerance_for(dtype).factor, dtype)
    judgement = judge_tensors(
        (replay.logits, eager.logits, reference.logits),
        (replay.cache, eager.cache, reference.cache),
        dtype,
        routers,
        graph_at,
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
    graphs: DecodeGraphs,
    bucket: int,
    batch: int,
    tokens: torch.Tensor,
    start_slot: int,
    start: CacheSnapshot,
    clock: PhaseClock | None = None,
) -> VerifyRow:
    """One case judged (criterion.judge_tensors): replay, eager and the float32 reference from the cache
    state `start` (whose next write slot is `start_slot`), for the teacher-forced `tokens` [steps, batch]."""
    session = graphs.session
    dtype = session.model.dtype
    clock = clock or PhaseClock()
    replay, eager, reference = run_case(graphs, tokens, start_slot, start, clock)
    with clock.phase("judging"):
        judgement = judge_runs(
            replay, eager, reference, dtype, lambda step: graph_name(graphs, bucket, start_slot + step)
        )
    measures = {f.name: getattr(judgement, f.name) for f in fields(VerifyRow) if hasattr(judgement, f.name)}
    for key in ("passed", "detail"):
        measures.pop(key)
    steps = tokens.shape[0]
    return VerifyRow(
        bucket,
        batch,
        steps,
        f"{start_slot}-{start_slot + steps - 1}",
        judgement.passed,
        judgement.detail,
        **measures,
        max_abs=(replay.logits - eager.logits).abs().max().item(),
        has_routers=reference.routers is not None and bool(reference.routers.routers),
        reference="float32" if dtype != torch.float32 else "float32: the model itself",
    )


def graph_name(graphs: DecodeGraphs, bucket: int, slot: int) -> str:
    """The graph of batch bucket `bucket` that a step writing `slot` replays, in words."""
    return f"graph (bucket {bucket}, context {context_for(slot, graphs.contexts)})"


def verify_graphs(
    graphs: DecodeGraphs,
    steps: int = 8,
    prompt_len: int = 16,
    seed: int = 0,
    on_row: Callable[[VerifyRow], None] | None = None,
    plan: CasePlan | None = None,
    clock: PhaseClock | None = None,
) -> list[VerifyRow]:
    """Every case of `plan` (default: `plan_cases` for these graphs: every graph at full and padded
    batch, and across each context boundary), all from one prefilled cache: each case copies only the
    rows and slots it writes, and puts them back after. `clock` sums the time of each phase."""
    plan = plan or plan_cases(graphs.buckets, graphs.contexts, steps, prompt_len)
    clock = clock or PhaseClock()
    session = graphs.session
    prompt = _draw(plan.rows, plan.prefill_len, session.vocab_size, seed)
    with clock.phase("prefill"):
        session.kv.reset()
        session.prefill(prompt, chunk=PREFILL_CHUNK)
    rows = []
    for number, case in enumerate(plan.cases):
        tokens = _draw(case.steps, case.batch, session.vocab_size, seed + 1 + number).to(session.device)
        start = session.kv.snapshot(case.bucket, case.start, case.steps).at_slot(case.start)
        row = _judge_guarded(graphs, case, tokens, start, clock)
        session.kv.restore(start)  # the prefilled state again, for the next case
        rows.append(row)
        if on_row:
            on_row(row)
    session.kv.reset()
    return rows


def _draw(rows: int, columns: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, columns), generator=torch.Generator().manual_seed(seed))


PREFILL_CHUNK = 256  # prompt tokens per forward: bounds the prefill's attention scores at long starts


def _judge_guarded(
    graphs: DecodeGraphs, case: Case, tokens: torch.Tensor, start: CacheSnapshot, clock: PhaseClock
) -> VerifyRow:
    """`judge_case` for one case; a replay that raises (a graph of the wrong shape or context, say) is
    that case's failure, not the end of verify."""
    try:
        row = judge_case(graphs, case.bucket, case.batch, tokens, case.start, start, clock)
    except (RuntimeError, IndexError) as err:
        if is_out_of_memory(err):
            raise
        problem = " ".join(str(err).split())[:300] or type(err).__name__
        nan = float("nan")
        row = VerifyRow(case.bucket, case.batch, case.steps, case.slots, False, f"the step raised: {problem}")
        row.logit_err = row.ratio = row.kl = row.cache_err = row.max_abs = nan
    row.context = case.context
    return row
