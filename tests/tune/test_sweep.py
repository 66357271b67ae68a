"""The coordinate descent of `tune`, timed here by a model of the chain instead of a GPU."""

from __future__ import annotations

import time

from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.sweep import BucketResult, descend

SLOW, FAST, FASTER = SkinnyConfig(16, 128), SkinnyConfig(32, 128), SkinnyConfig(64, 128)
REFUSED = SkinnyConfig(128, 1024)
COST = {SLOW: 10.0, FAST: 8.0, FASTER: 7.0}


def chain_time(cfgs) -> float:
    if REFUSED in cfgs.values():
        raise RuntimeError("out of resource: shared memory")
    return sum(COST[c] for c in cfgs.values())


def test_each_op_keeps_the_fastest_config_with_the_others_held():
    start = {"gate_up": SLOW, "down": SLOW}
    heard = []
    chosen, took = descend(
        start, lambda op: [REFUSED, FAST, FASTER], chain_time, chain_time(start), time.monotonic() + 60,
        trial=lambda op, cfg, t: heard.append((op, cfg, t)),
    )  # fmt: skip
    assert chosen == {"gate_up": FASTER, "down": FASTER} and took == 14.0
    # gate_up is swept again after down changed (2 configs: its own is skipped), keeps nothing, and that ends
    # the descent: down, the last to change, is not swept again with gate_up as it was
    assert (("gate_up", REFUSED, None)) in heard and len(heard) == 8
    heard.clear()
    descend(start, lambda op: [REFUSED, FAST, FASTER], chain_time, chain_time(start), time.monotonic() + 60,
            trial=lambda op, cfg, t: heard.append((op, cfg, t)), passes=1)  # fmt: skip
    assert len(heard) == 6


def test_a_pass_that_kept_a_config_is_followed_by_another():
    """q's best depends on k's: FAST while k is SLOW, FASTER once k is FASTER; one pass leaves q at FAST."""

    def coupled(cfgs) -> float:
        q, k = cfgs["q"], cfgs["k"]
        q_cost = {SLOW: 10.0, FAST: 8.0, FASTER: 9.0 if k == SLOW else 6.0}[q]
        return q_cost + COST[k]

    start = {"q": SLOW, "k": SLOW}
    grid = lambda op: [FAST, FASTER]  # noqa: E731
    once, _ = descend(start, grid, coupled, coupled(start), time.monotonic() + 60, passes=1)
    assert once == {"q": FAST, "k": FASTER}
    chosen, took = descend(start, grid, coupled, coupled(start), time.monotonic() + 60)
    assert chosen == {"q": FASTER, "k": FASTER} and took == 13.0


def test_the_first_round_shares_the_time_and_a_cut_op_resumes_where_it_stopped(monkeypatch):
    """Each timing costs a second of a 20 s budget. `b` and `c` have one slower config each; `a`, 16 configs
    each faster than the last, gets half of the 19 s left after `b` in the first round (10 configs), then
    `c` its share; the descent does not end before `a` has swept its whole grid: it resumes at its 11th (the
    others unchanged: nothing tried again) and keeps the fastest."""
    from accelerate_graph.tune import sweep

    clock = [0.0]
    monkeypatch.setattr(sweep.time, "monotonic", lambda: clock[0])
    configs = [SkinnyConfig(16, 128, num_stages=s) for s in range(1, 18)]
    cost = {cfg: 100.0 - i for i, cfg in enumerate(configs)} | {SLOW: 200.0, FAST: 50.0, FASTER: 50.0}

    def timed(cfgs) -> float:
        clock[0] += 1.0
        return sum(cost[c] for c in cfgs.values())

    start = {"b": FAST, "a": configs[0], "c": FASTER}
    best, clock[0], heard = timed(start), 0.0, []
    grid = lambda op: configs[1:] if op == "a" else [SLOW]  # noqa: E731
    chosen, took = descend(start, grid, timed, best, 20.0, trial=lambda op, c, t: heard.append((op, c)))
    assert [op for op, _ in heard][:13] == ["b"] + ["a"] * 10 + ["c", "b"]
    assert [c for op, c in heard if op == "a"] == configs[1:]  # each once, in the grid's order
    assert chosen == {**start, "a": configs[-1]} and took == cost[configs[-1]] + 100.0


def test_a_gain_below_min_gain_keeps_the_config_and_the_deadline_stops_trying():
    start = {"o": FAST}
    chosen, _ = descend(start, lambda op: [FASTER], chain_time, 7.01, time.monotonic() + 60, min_gain=0.01)
    assert chosen == {"o": FAST}  # 7.0 against 7.01: not 1% faster
    chosen, took = descend(start, lambda op: [FASTER], chain_time, 8.0, time.monotonic() - 1)
    assert chosen == {"o": FAST} and took == 8.0


def test_batch_1_is_written_only_where_the_skinny_chain_beats_inductor_and_more_rows_always():
    keys = {"o": "residual|m1|n64|k64"}
    won = BucketResult(1, {"o": SLOW}, {"o": FAST}, 10.0, 8.0, 9.0, keys)
    lost = BucketResult(1, {"o": SLOW}, {"o": FAST}, 10.0, 8.0, 7.5, keys)
    assert won.written and won.entries() == {"residual|m1|n64|k64": FAST}
    assert not lost.written and lost.entries() == {}
    assert BucketResult(8, {"o": SLOW}, {"o": FAST}, 10.0, 8.0, 7.5, {"o": "residual|m8|n64|k64"}).written
