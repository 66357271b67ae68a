"""Prove a replay is as right as eager execution: the same decode steps from the same cache state, run
three ways (replay, eager, and a float32 reference), and replay judged by how far it is from the
reference compared with how far eager is (verify/criterion.py; the reasoning: docs/VERIFY.md).

For each bucket: a full batch, and the smallest batch padded up to it; with context buckets, also
a run across each boundary between them (the step moves to the next graph mid-run); what else
(left-padded rows, positions over each context bucket, long runs) is `cases.Coverage`. The eager
reference runs only the real rows over the whole cache, so a pass also proves padding rows change
nothing in real rows and a context bucket's shorter attention misses nothing. Inputs are
drawn up front (teacher forcing): near-uniform logits of random weights would make greedy tokens
diverge between two numerically equivalent runs.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch

from accelerate_graph.common.errors import is_out_of_memory
from accelerate_graph.core.buckets import context_for
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import PREFILL_CHUNK, DecodeSession, draw_inputs
from accelerate_graph.core.static_cache import CacheSnapshot
from accelerate_graph.verify.cases import BASIC, Case, CasePlan, Coverage, plan_cases, sliding_window
from accelerate_graph.verify.criterion import Judgement, judge_tensors, tolerance_for
from accelerate_graph.verify.finite import GraphAt
from accelerate_graph.verify.reference import (
    float32_reference,
    prefill_in_use,
    probe_steps_a_forward,
    reference_steps,
    slots_in_use,
    step_in_use,
    steps_a_forward,
)
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
    padding: str = ""  # each real row's left padding, e.g. "0/5/10" (empty: none)


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


def _run(
    session: DecodeSession, step_once: Callable, tokens: torch.Tensor, first: int, routers, pads: torch.Tensor
) -> Run:
    logits = []
    with recording(session.model, routers) as log:
        for i in range(tokens.shape[0]):
            positions = first + i - pads  # a left-padded row counts its positions from its first token
            logits.append(step_once(session, tokens[i], positions))
    return _finished(session, torch.stack(logits), log, first, pads)


def _reference_run(session: DecodeSession, tokens: torch.Tensor, first: int, routers, pads: torch.Tensor) -> Run:
    """The float32 reference's run (inside `float32_reference`): its steps many to a forward, its router
    logits logged as the steps one by one would have logged them."""
    with recording(session.model, routers) as log:
        logits = reference_steps(session, tokens, first, pads)
    log.split_steps(tokens.shape[1], math.ceil(tokens.shape[0] / steps_a_forward(session)))
    return _finished(session, logits, log, first, pads)


def _finished(session: DecodeSession, logits: torch.Tensor, log, first: int, pads: torch.Tensor) -> Run:
    """The run whose `logits` [steps, batch, V] were just computed from slot `first`: what it wrote and where
    the write positions stand."""
    steps, batch = logits.shape[:2]
    positions = torch.stack([p.reshape(()) for p in session.kv.positions()]).tolist()  # one sync, not one a layer
    # per-row mode writes a row's steps at its own positions: from `first` less its padding
    shift = int(pads.max()) if session.per_row and pads.numel() else 0
    cache = written(session, batch, first - shift, steps + shift)
    return Run(logits, cache, positions, log)


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
    graphs: DecodeGraphs,
    tokens: torch.Tensor,
    first: int,
    start: CacheSnapshot,
    clock: PhaseClock | None = None,
    pads: tuple[int, ...] = (),
) -> tuple[Run, Run, Run]:
    """Replay, eager and float32 reference runs of the teacher-forced `tokens` [steps, batch], each from
    the cache state `start` (whose next write slot is `first`); with `pads`, each row left-padded by
    that many slots: the three runs read the same mask buffer and positions."""
    session = graphs.session
    batch = tokens.shape[1]
    padding = torch.tensor(pads or (0,) * batch, dtype=torch.long, device=session.device)
    session.hide_left_padding(padding)
    try:
        return _three_runs(graphs, tokens, first, start, clock or PhaseClock(), padding)
    finally:
        session.show_every_slot()


def _three_runs(
    graphs: DecodeGraphs, tokens: torch.Tensor, first: int, start: CacheSnapshot, clock: PhaseClock, pads
) -> tuple[Run, Run, Run]:
    session = graphs.session
    routers = find_routers(session.model)

    def eager(s, t, p):
        return step_in_use(s, t, p).float().clone()

    def replay(s, t, p):
        return graphs.run(t, p).float()

    with clock.phase("eager"), slots_in_use(session):
        session.kv.restore(start)
        eager_run = _run(session, eager, tokens, first, routers, pads)
    reference_run = eager_run
    if session.model.dtype != torch.float32:
        with clock.phase("float32 reference"):
            session.kv.restore(start)
            with float32_reference(session):
                reference_run = _reference_run(session, tokens, first, routers, pads)
    with clock.phase("replay"):
        session.kv.restore(start)
        replay_run = _run(session, replay, tokens, first, [], pads)
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
    graphs: DecodeGraphs, bucket: int, batch: int, steps: int, prompt_len: int, seed: int = 0, ragged: bool = True
) -> VerifyRow:
    """One batch from its own prompts of up to `prompt_len` tokens (the check `capture` runs): with
    `ragged` and two rows or more, prompts of different lengths left-padded as generate pads them
    (row 0 the whole `prompt_len`, the last row one token), prefilled and decoded under their mask."""
    session = graphs.session
    if prompt_len + steps > session.max_cache_len:
        steps = session.max_cache_len - prompt_len
    prompt, tokens = draw_inputs(batch, steps, prompt_len, session.vocab_size, seed + 1000 * bucket + batch)
    pads = ()
    if ragged and batch > 1 and prompt_len > 1:
        pads = tuple(round(r * (prompt_len - 1) / (batch - 1)) for r in range(batch))
    probe_steps_a_forward(session)
    session.kv.reset()
    padding = torch.tensor(pads or (0,) * batch, dtype=torch.long)
    try:
        session.prefill(prompt, pads=padding)
    finally:
        session.show_every_slot()
    start = session.kv.snapshot(bucket, prompt_len, steps)  # only what the steps overwrite
    row = judge_case(graphs, bucket, batch, tokens.to(session.device), prompt_len, start, pads=pads)
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
    pads: tuple[int, ...] = (),
) -> VerifyRow:
    """One case judged (criterion.judge_tensors): replay, eager and the float32 reference from the cache
    state `start` (whose next write slot is `start_slot`), for the teacher-forced `tokens` [steps, batch],
    each row left-padded by `pads` (empty: none)."""
    session = graphs.session
    dtype = session.model.dtype
    clock = clock or PhaseClock()
    replay, eager, reference = run_case(graphs, tokens, start_slot, start, clock, pads)
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
        padding="/".join(map(str, pads)),
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
    coverage: Coverage = BASIC,
    replays: dict[tuple[int, int], int] | None = None,
) -> list[VerifyRow]:
    """Every case of `plan` (default: `plan_cases` for these graphs and `coverage`: every graph at full
    and padded batch, and across each context boundary, plus what `coverage` adds), all from one
    prefilled cache: each case copies only the rows and slots it writes, and puts them back after.
    Before a case, each graph it replays is replayed up to the plan's `soak` count (`replays` keeps
    the counts, across calls when given). `clock` sums the time of each phase."""
    session = graphs.session
    window = sliding_window(session.model.config)
    plan = plan or plan_cases(graphs.buckets, graphs.contexts, steps, prompt_len, coverage=coverage, window=window)
    clock = clock or PhaseClock()
    replays = {} if replays is None else replays
    prompt = _draw(plan.rows, plan.prefill_len, session.vocab_size, seed)
    with clock.phase("prefill"):
        probe_steps_a_forward(session)
        session.kv.reset()
        prefill_in_use(session, prompt, PREFILL_CHUNK)
    rows = []
    # a graph's long run comes before the last case that replays it: the cases before count toward it
    last = {key: number for number, case in enumerate(plan.cases) for key in _graphs_of(graphs, case)}
    for number, case in enumerate(plan.cases):
        tokens = _draw(case.steps, case.batch, session.vocab_size, seed + 1 + number).to(session.device)
        with clock.phase("long runs"):
            due = {key for key in _graphs_of(graphs, case) if last[key] == number}
            _soak_guarded(graphs, case, tokens[0], plan.coverage.soak, replays, due)
        start = session.kv.snapshot(case.bucket, case.start, case.steps).at_slot(case.start)
        row = _judge_guarded(graphs, case, tokens, start, clock)
        _count_replays(graphs, case, replays)
        session.kv.restore(start)  # the prefilled state again, for the next case
        rows.append(row)
        if on_row:
            on_row(row)
    session.kv.reset()
    return rows


def _draw(rows: int, columns: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, columns), generator=torch.Generator().manual_seed(seed))


def _graphs_of(graphs: DecodeGraphs, case: Case) -> list[tuple[int, int]]:
    """The (bucket, context) graphs `case`'s steps replay, in order."""
    keys = [(case.bucket, context_for(slot, graphs.contexts)) for slot in range(case.start, case.start + case.steps)]
    return list(dict.fromkeys(keys))


def soak(
    graphs: DecodeGraphs, case: Case, tokens: torch.Tensor, target: int, replays: dict, due: set | None = None
) -> None:
    """Replay each graph `case` runs (those in `due`, if given) until it has been replayed `target` times
    (counted in `replays`), at the case's first slot in that graph, so the judged steps come after them;
    the cache rows and slots those replays write are put back after."""
    session = graphs.session
    for slot in range(case.start, case.start + case.steps):
        key = (case.bucket, context_for(slot, graphs.contexts))
        if due is not None and key not in due:
            continue
        missing = target - replays.get(key, 0)
        if missing <= 0:
            continue
        saved = session.kv.snapshot(case.bucket, slot, 1)
        try:
            with torch.no_grad():
                for _ in range(missing):
                    session.kv.rewind(slot)
                    graphs.run(tokens, torch.full_like(tokens, slot), copy=False)
        finally:
            session.kv.restore(saved)
        replays[key] = target


def _soak_guarded(graphs: DecodeGraphs, case: Case, tokens: torch.Tensor, target: int, replays: dict, due: set) -> None:
    """`soak`; a replay that raises is left to the judged case, which reports it as its failure."""
    try:
        soak(graphs, case, tokens, target, replays, due)
    except (RuntimeError, IndexError) as err:
        if is_out_of_memory(err):
            raise


def _count_replays(graphs: DecodeGraphs, case: Case, replays: dict) -> None:
    for slot in range(case.start, case.start + case.steps):
        key = (case.bucket, context_for(slot, graphs.contexts))
        replays[key] = replays.get(key, 0) + 1


def _judge_guarded(
    graphs: DecodeGraphs, case: Case, tokens: torch.Tensor, start: CacheSnapshot, clock: PhaseClock
) -> VerifyRow:
    """`judge_case` for one case; a replay that raises (a graph of the wrong shape or context, say) is
    that case's failure, not the end of verify."""
    try:
        row = judge_case(graphs, case.bucket, case.batch, tokens, case.start, start, clock, case.pads)
    except (RuntimeError, IndexError) as err:
        if is_out_of_memory(err):
            raise
        problem = " ".join(str(err).split())[:300] or type(err).__name__
        nan = float("nan")
        row = VerifyRow(case.bucket, case.batch, case.steps, case.slots, False, f"the step raised: {problem}")
        row.padding = case.padding
        row.logit_err = row.ratio = row.kl = row.cache_err = row.max_abs = nan
    row.context = case.context
    return row
