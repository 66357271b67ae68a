"""Coordinate descent over the ops' grids, timed as the whole chain: for each op in turn every config of its
grid with the others held; one that beats the best by more than `min_gain` is kept."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune import grids
from accelerate_graph.tune.model_shapes import LayerShapes

MIN_GAIN = 0.005  # relative: below this a timing difference is noise


def descend(
    current: dict[str, SkinnyConfig],
    grid: Callable[[str], list[SkinnyConfig]],
    timed: Callable[[dict[str, SkinnyConfig]], float],
    best: float,
    deadline: float,
    min_gain: float = MIN_GAIN,
    trial: Callable[[str, SkinnyConfig, float | None], None] = lambda op, cfg, took: None,
) -> tuple[dict[str, SkinnyConfig], float]:
    """For each op of `current` in its order, every config of grid(op) with the others held, timed by
    timed(configs); one faster than the best by more than `min_gain` is kept. Stops trying at `deadline`
    (time.monotonic). A config the compiler refuses (shared memory, registers) is skipped. `trial` hears each
    (op, config, time or None when refused). Returns the configs and their time."""
    for op in list(current):
        for cfg in grid(op):
            if time.monotonic() > deadline:
                return current, best
            if cfg == current[op]:
                continue
            try:
                took = timed({**current, op: cfg})
            except Exception:  # noqa: BLE001 - Triton's and the driver's refusals have no common type
                trial(op, cfg, None)
                continue
            trial(op, cfg, took)
            if took < best * (1 - min_gain):
                current, best = {**current, op: cfg}, took
    return current, best


@dataclasses.dataclass
class BucketResult:
    """One row bucket: the configs before (the table in use, else the heuristic) and chosen, the chain's
    microseconds per layer with each and on inductor's kernels and cuBLAS. `written`: whether the chosen configs
    go into the table: at one row only when they beat inductor's (a shape the table has at batch 1 runs the
    skinny kernels there); above, always (the table gives only the config, layer_program decides where they run)."""

    rows: int
    before: dict[str, SkinnyConfig]
    chosen: dict[str, SkinnyConfig]
    before_us: float
    chosen_us: float
    inductor_us: float
    keys: dict[str, str]
    trials: int = 0

    @property
    def written(self) -> bool:
        return self.rows > 1 or self.chosen_us < self.inductor_us

    def entries(self) -> dict[str, SkinnyConfig]:
        return {self.keys[op]: cfg for op, cfg in self.chosen.items()} if self.written else {}


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

    tried = [0]

    def counted(op, cfg, took):
        tried[0] += 1
        trial(op, cfg, took)

    chosen, _ = descend(dict(before), grid, chain.layer_us, before_us, deadline, trial=counted)
    # timed again: the descent's best was one sample among many; unchanged configs keep their first time,
    # so a report never shows the table's own configs as a change
    chosen_us = before_us if chosen == before else chain.layer_us(chosen)
    keys = {op: configs.table_key(kind, configs.m_bucket(rows), ns, k) for op, (kind, ns, k) in shapes.calls.items()}
    return BucketResult(rows, before, chosen, before_us, chosen_us, chain.inductor_layer_us(), keys, tried[0])
