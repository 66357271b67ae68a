"""Coordinate descent over the ops' grids, timed as the whole chain: for each op in turn every config of its
grid with the others held; one that beats the best by more than `min_gain` is kept, and the ops are swept
again while another op changed since their last sweep. In the first round each op gets an equal share of the
time left, so a short budget tries every op's likeliest configs (the grids come likeliest first) rather than
one op's whole grid."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune import grids
from accelerate_graph.tune.compile_ahead import CompileAhead, first_round_order
from accelerate_graph.tune.model_shapes import LayerShapes

MIN_GAIN = 0.005  # relative: below this a timing difference is noise
PASSES = 3  # sweeps an op at most; a round in which nothing changed ends the descent sooner


def descend(
    current: dict[str, SkinnyConfig],
    grid: Callable[[str], list[SkinnyConfig]],
    timed: Callable[[dict[str, SkinnyConfig]], float],
    best: float,
    deadline: float,
    min_gain: float = MIN_GAIN,
    trial: Callable[[str, SkinnyConfig, float | None], None] = lambda op, cfg, took: None,
    accept: Callable[[str, SkinnyConfig], bool] = lambda op, cfg: True,
    passes: int = PASSES,
) -> tuple[dict[str, SkinnyConfig], float]:
    """For each op of `current` in its order, every config of grid(op) with the others held, timed by
    timed(configs); one faster than the best by more than `min_gain` is kept. The ops are swept round again
    until every op has been swept since the last that kept a config (an op's best can move once another
    changed; the one that changed needs no second look with the others as they are), at most `passes` sweeps
    an op. Stops trying at `deadline` (time.monotonic); in the first round an op stops at its share of the time
    left (that over the ops not yet swept), and the descent goes on until it has swept its whole grid, its next
    sweep skipping what it tried while no other op has changed since. A config the compiler refuses (shared
    memory, registers) or that accept(op, config) refuses (a wrong result) is skipped. `trial` hears each (op,
    config, time or None when refused). Returns the configs and their time."""
    ops = list(current)
    quiet = -1  # ops swept whole since the last that kept a config, that one not counted
    tried: dict[str, tuple[dict, set]] = {}  # op -> the other ops' configs when it last swept, what it tried
    for sweep in range(passes * len(ops)):
        if quiet == len(ops) - 1:
            break
        op, kept, cut = ops[sweep % len(ops)], False, False
        stop, now = deadline, time.monotonic()
        if sweep < len(ops):
            stop = min(deadline, now + (deadline - now) / (len(ops) - sweep))
        others = {o: c for o, c in current.items() if o != op}
        held, done = tried.get(op, (None, set()))
        done = done if held == others else set()
        tried[op] = (others, done)
        for cfg in grid(op):
            if time.monotonic() > deadline:
                return current, best
            if cfg == current[op] or cfg in done:
                continue
            if time.monotonic() > stop:
                cut = True
                break
            done.add(cfg)
            try:
                if not accept(op, cfg):
                    trial(op, cfg, None)
                    continue
                took = timed({**current, op: cfg})
            except Exception:  # noqa: BLE001 - Triton's and the driver's refusals have no common type
                trial(op, cfg, None)
                continue
            trial(op, cfg, took)
            if took < best * (1 - min_gain):
                current, best, kept = {**current, op: cfg}, took, True
        if cut:  # the descent ends only after a whole sweep of this op
            quiet = -1
        elif kept:
            quiet = 0
        else:
            quiet += 1
    return current, best


@dataclasses.dataclass
class BucketResult:
    """One row bucket: the configs before (the table in use, else the heuristic) and chosen, the chain's
    microseconds per layer with each and on inductor's kernels and cuBLAS (None for FP8 weights: at every
    decode batch their kernel runs whatever the table holds). `written`: whether the chosen configs go into the table: at one
    row only when they beat inductor's (a shape the table has at batch 1 runs the skinny kernels there); above,
    always (the table gives only the config, layer_program decides where they run). `wrong`: the configs that
    disagreed with the reference (FP8), one line each; `unchecked`: ops none of whose configs agreed, never
    written; `cut_short`: ops the deadline left configs of untried."""

    rows: int
    before: dict[str, SkinnyConfig]
    chosen: dict[str, SkinnyConfig]
    before_us: float
    chosen_us: float
    inductor_us: float | None
    keys: dict[str, str]
    # every config tried, in order: (op, config, the chain's us a layer with it; None: refused or wrong)
    trials: list[tuple[str, SkinnyConfig, float | None]] = dataclasses.field(default_factory=list)
    wrong: list[str] = dataclasses.field(default_factory=list)
    unchecked: frozenset[str] = frozenset()
    # each op's configs to try besides the one it started from: where trials are fewer, the deadline cut it
    grid_sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    unreached: frozenset[str] = frozenset()  # FP8 ops the deadline never reached, not written
    seconds: float = 0.0  # the bucket's wall time: its chain made, timed before, swept, timed after
    trial_seconds: list[float] = dataclasses.field(default_factory=list)  # each trial's wall time, as `trials`

    @property
    def cut_short(self) -> dict[str, tuple[int, int]]:
        """Ops the deadline left with configs untried: op -> (tried, to try), in the ops' order."""
        tried = {op: sum(1 for o, _, _ in self.trials if o == op) for op in self.grid_sizes}
        return {op: (tried[op], size) for op, size in self.grid_sizes.items() if tried[op] < size}

    @property
    def written(self) -> bool:
        return self.rows > 1 or self.inductor_us is None or self.chosen_us < self.inductor_us

    def entries(self) -> dict[str, SkinnyConfig]:
        if not self.written:
            return {}
        left_out = self.unchecked | self.unreached
        return {self.keys[op]: cfg for op, cfg in self.chosen.items() if op not in left_out}


class _Recorded:
    """A sweep's trial callback that records every trial and its wall seconds (since the one before, or since
    it was made: compiling, checking and timing the config), then tells `trial`."""

    def __init__(self, trial: Callable):
        self.trial, self.last = trial, time.monotonic()
        self.tried: list[tuple[str, SkinnyConfig, float | None]] = []
        self.seconds: list[float] = []

    def __call__(self, op: str, cfg: SkinnyConfig, took: float | None) -> None:
        now = time.monotonic()
        self.tried.append((op, cfg, took))
        self.seconds.append(now - self.last)
        self.last = now
        self.trial(op, cfg, took)


def table_configs(shapes: LayerShapes, rows: int, sms: int) -> dict[str, SkinnyConfig]:
    """Each op's config now: the table in use's, else the heuristic's."""
    return {op: configs.config_for(kind, rows, ns, k, sms) for op, (kind, ns, k) in shapes.calls.items()}


def tune_bucket(chain, sms: int, deadline: float, trial=lambda op, cfg, took: None) -> BucketResult:
    """The configs of `chain`'s ops at its rows, chosen by coordinate descent until `deadline`."""
    shapes, rows = chain.shapes, chain.rows
    before = table_configs(shapes, rows, sms)
    before_us = chain.layer_us(before)

    def grid(op: str) -> list[SkinnyConfig]:
        _, ns, k = shapes.calls[op]
        return grids.grid(rows, sum(ns), k, sms)

    heard = _Recorded(trial)
    sizes = _grid_sizes(before, grid)
    chosen, _ = descend(dict(before), grid, chain.layer_us, before_us, deadline, trial=heard)
    # timed again: the descent's best was one sample among many; unchanged configs keep their first time,
    # so a report never shows the table's own configs as a change
    chosen_us = before_us if chosen == before else chain.layer_us(chosen)
    keys = {op: configs.table_key(kind, configs.m_bucket(rows), ns, k) for op, (kind, ns, k) in shapes.calls.items()}
    return BucketResult(
        rows, before, chosen, before_us, chosen_us, chain.inductor_layer_us(), keys, heard.tried, grid_sizes=sizes,
        trial_seconds=heard.seconds,
    )  # fmt: skip


def tune_fp8_bucket(
    chain, sms: int, deadline: float, trial=lambda op, cfg, took: None, ahead: CompileAhead | None = None
) -> BucketResult:
    """The configs of an FP8 chain's ops (tune/fp8_chain.py) at its rows, chosen by coordinate descent until
    `deadline`; a config enters only after its product agreed with the reference (chain.error_ulps within
    chain.max_ulps). An op whose config in use disagrees starts from the first of its grid that agrees.
    `ahead`: workers that compile the configs before the descent reaches them."""
    from accelerate_graph.quant import fp8_skinny

    rows, block, name = chain.rows, chain.block, fp8_skinny.device_name(chain.device)
    before = {
        op: fp8_skinny.fitted(fp8_skinny.config_named(name, rows, n, k, block, sms, op in chain.gate_up_ops), block)
        for op, (n, k) in chain.ops.items()
    }

    def grid(op: str) -> list[SkinnyConfig]:
        n, k = chain.ops[op]
        return grids.fp8_grid(rows, n, k, block, sms, op in chain.gate_up_ops, op in chain.normed_ops)

    if ahead is not None:
        ahead.queue(rows, first_round_order(before, grid))
    before_us = chain.layer_us(before)
    wrong: list[str] = []

    def agrees(op: str, cfg: SkinnyConfig) -> bool:
        error = chain.error_ulps(op, cfg)
        if not error <= chain.max_ulps:  # NaN too
            wrong.append(f"{op} {grids.describe(cfg)}: {error:.1f} ulps")
        return error <= chain.max_ulps

    start, unchecked = dict(before), set()
    for op, cfg in before.items():
        if not _agrees_quietly(agrees, op, cfg):
            start[op] = next((c for c in grid(op) if _agrees_quietly(agrees, op, c)), cfg)
            if start[op] == cfg:
                unchecked.add(op)
    start_us = before_us if start == before else chain.layer_us(start)
    heard = _Recorded(trial)
    sizes = _grid_sizes(start, grid)
    chosen, _ = descend(start, grid, chain.layer_us, start_us, deadline, trial=heard, accept=agrees)
    chosen_us = start_us if chosen == start else chain.layer_us(chosen)
    keys = {op: fp8_skinny.table_key(block, rows, n, k, op in chain.gate_up_ops) for op, (n, k) in chain.ops.items()}
    wrong = list(dict.fromkeys(wrong))  # an op none of whose configs agreed tried them twice
    result = BucketResult(
        rows, before, chosen, before_us, chosen_us, None, keys, heard.tried, wrong, frozenset(unchecked), sizes,
        trial_seconds=heard.seconds,
    )  # fmt: skip
    # an op the deadline never reached keeps what it started from, not written unless that corrected the config
    # in use: the FP8 kernel runs the default without an entry, and a default in the table would read as tuned
    result.unreached = frozenset(
        op for op, (count, _) in result.cut_short.items() if count == 0 and start[op] == before[op]
    )
    return result


def _grid_sizes(start: dict[str, SkinnyConfig], grid: Callable[[str], list[SkinnyConfig]]) -> dict[str, int]:
    """How many configs descend would try for each op: its grid but the config it starts from."""
    return {op: sum(1 for cfg in grid(op) if cfg != start[op]) for op in start}


def _agrees_quietly(agrees: Callable[[str, SkinnyConfig], bool], op: str, cfg: SkinnyConfig) -> bool:
    """agrees(op, cfg), False where the compiler refuses the config."""
    try:
        return agrees(op, cfg)
    except Exception:  # noqa: BLE001 - Triton's and the driver's refusals have no common type
        return False
