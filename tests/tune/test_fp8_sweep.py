"""`tune --weights fp8`'s sweep, timed here by a model of the chain instead of a GPU: a config enters only after
its product agreed with the reference, however fast it is, and the keys are the FP8 table's."""

from __future__ import annotations

import time

import torch

from accelerate_graph.quant import fp8_skinny
from accelerate_graph.tune import grids
from accelerate_graph.tune.sweep import tune_fp8_bucket

OPS = {"gate_up": (9728, 896), "down": (896, 4864), "qkv": (1152, 896), "o": (896, 896)}  # Qwen2.5-0.5B's


class FakeChain:
    """What tune_fp8_bucket reads of an Fp8Chain: each config costs 10 us but `fast` ones (5) and `wrong` ones
    (1: the fastest, and their product is 9 ulps off, or NaN for those in `nan`)."""

    max_ulps = 2.0

    def __init__(self, rows: int, block: int | None, fast=(), wrong=(), nan=()):
        self.rows, self.block, self.device, self.ops = rows, block, torch.device("cpu"), dict(OPS)
        self.gate_up_ops = self.normed_ops = frozenset()
        self.fast, self.wrong, self.nan, self.checked = set(fast), set(wrong) | set(nan), set(nan), []
        self.layers_count = 8

    def layer_us(self, cfgs) -> float:
        return sum(1.0 if (op, c) in self.wrong else 5.0 if (op, c) in self.fast else 10.0 for op, c in cfgs.items())

    def error_ulps(self, op, cfg) -> float:
        self.checked.append((op, cfg))
        if (op, cfg) in self.nan:
            return float("nan")
        return 9.0 if (op, cfg) in self.wrong else 0.5


def grid(op: str, rows: int, block: int | None):
    return grids.fp8_grid(rows, *OPS[op], block)


def test_the_fastest_config_is_left_out_when_its_product_disagrees():
    rows, block = 8, 128
    down = grid("down", rows, block)
    chain = FakeChain(rows, block, fast={("down", down[3])}, wrong={("down", down[1])})
    result = tune_fp8_bucket(chain, 132, time.monotonic() + 60)
    assert result.chosen["down"] == down[3] and result.chosen_us < result.before_us
    assert result.wrong == [f"down {grids.describe(down[1])}: 9.0 ulps"]
    assert ("down", down[3]) in chain.checked and result.written and result.inductor_us is None
    key = fp8_skinny.table_key(block, rows, 896, 4864)
    assert key == "fp8_block|m8|n896|k4864" and result.entries()[key] == down[3]
    assert len(result.entries()) == 4 and not result.unchecked


def test_a_config_in_use_that_disagrees_is_replaced_and_an_op_with_none_agreeing_is_not_written():
    rows, block = 1, None
    before = {op: fp8_skinny.config_named("", rows, n, k, block) for op, (n, k) in OPS.items()}
    everything_o = {("o", c) for c in [before["o"], *grid("o", rows, block)]}
    chain = FakeChain(rows, block, wrong=everything_o, nan={("qkv", before["qkv"])})
    result = tune_fp8_bucket(chain, 132, time.monotonic() + 60)
    assert result.before == before and f"qkv {grids.describe(before['qkv'])}: nan ulps" in result.wrong
    assert len(result.wrong) == len(set(result.wrong)) == 1 + len(everything_o)
    assert result.chosen["qkv"] != before["qkv"] and ("qkv", result.chosen["qkv"]) not in chain.wrong
    assert result.unchecked == {"o"} and fp8_skinny.table_key(None, 1, 896, 896) not in result.entries()
    assert set(result.entries()) == {fp8_skinny.table_key(None, 1, *OPS[op]) for op in ("gate_up", "down", "qkv")}
    assert all(key.startswith("fp8_channel|m1|") for key in result.entries())


def test_the_deadline_stops_the_trials():
    chain = FakeChain(16, None)
    result = tune_fp8_bucket(chain, 132, time.monotonic() - 1)
    assert result.trials == [] and result.chosen == result.before


def test_every_trial_is_kept_and_reported_with_its_time():
    """What lost is evidence too: the JSON report lists each config tried, its us a layer, null where refused."""
    from pathlib import Path

    from accelerate_graph.tune.model_shapes import LayerShapes
    from accelerate_graph.tune.run import TuneReport

    rows, block = 8, None
    down = grid("down", rows, block)
    chain = FakeChain(rows, block, fast={("down", down[2])}, wrong={("down", down[0])})
    result = tune_fp8_bucket(chain, 132, time.monotonic() + 60)
    tried = {op for op, _, _ in result.trials}
    assert tried == set(OPS) and len(result.trials) >= sum(len(grid(op, rows, block)) for op in OPS) - len(OPS)
    assert ("down", down[0], None) in result.trials and ("down", down[2], 35.0) in result.trials
    shapes = LayerShapes("m", 896, {op: ("fp8", (n,), k) for op, (n, k) in OPS.items()}, frozenset(), 1e-6)
    (bucket,) = TuneReport("GPU", shapes, [result], Path("t.json"), weights="fp8").to_dict()["buckets"]
    assert len(bucket["trials"]) == len(result.trials) == len(result.trial_seconds)
    fast = next(t for t in bucket["trials"] if t["op"] == "down" and t["config"] == grids.describe(down[2]))
    assert fast["us_per_layer"] == 35.0 and 0 <= fast["seconds"] < 60  # its wall time: compile, check, timing


def test_what_the_budget_left_untried_is_said_and_ops_never_reached_are_not_written(monkeypatch):
    """A bucket whose deadline came mid-sweep names each op's configs tried against its grid; the first round
    gives each op an equal share of the time left, so a budget of four timings tries every op's likeliest
    config rather than the first op's grid alone. An op never reached keeps its starting config but is not
    written (the kernel runs the default without an entry anyway, and a default in the table would read as
    tuned)."""
    from accelerate_graph.tune import sweep
    from cli.tune_cmd import _cut_short_line

    clock = [0.0]
    monkeypatch.setattr(sweep.time, "monotonic", lambda: clock[0])

    class Ticking(FakeChain):
        def layer_us(self, cfgs):
            clock[0] += 1.0  # each timing costs a second of the budget
            return super().layer_us(cfgs)

    rows = 8
    shared = tune_fp8_bucket(Ticking(rows, None), 132, 4.5)  # the starting chain's timing, then four
    assert {op: tried for op, (tried, _) in shared.cut_short.items()} == dict.fromkeys(OPS, 1)
    assert not shared.unreached and set(shared.entries()) == {fp8_skinny.table_key(None, rows, *OPS[op]) for op in OPS}
    clock[0] = 0.0
    result = tune_fp8_bucket(Ticking(rows, None), 132, 2.5)  # room for two
    reached, rest, sizes = list(OPS)[:2], list(OPS)[2:], result.grid_sizes
    assert all(0 < sizes[op] == len([c for c in grid(op, rows, None) if c != result.before[op]]) for op in OPS)
    assert {op: result.cut_short[op] for op in OPS} == {op: (int(op in reached), sizes[op]) for op in OPS}
    assert result.unreached == set(rest)
    assert set(result.entries()) == {fp8_skinny.table_key(None, rows, *OPS[op]) for op in reached}
    line = _cut_short_line(result)
    assert line.startswith("8 row(s): the budget ran out") and f"{reached[0]} 1 of {sizes[reached[0]]}" in line
    assert "not written: " + ", ".join(sorted(rest)) in line
    complete = tune_fp8_bucket(FakeChain(rows, None), 132, time.monotonic() + 60)
    assert complete.cut_short == {} and not complete.unreached
