"""The contender registry: every bench path reads it, and one new entry is all a new contender needs."""

from __future__ import annotations

import pytest

import accelerate_graph.bench.contenders as registry
import cli.bench_tables
from accelerate_graph.bench.contenders import CONTENDERS, GENERATE, STEP, Contender, SetupColumn, Tier, TimedStep
from accelerate_graph.bench.floor import Bandwidth
from accelerate_graph.bench.options import CONTENDERS as COMPARE_NAMES
from accelerate_graph.bench.options import parse_compare
from accelerate_graph.bench.results import BenchReport, fill_speedups
from accelerate_graph.bench.run import BenchHooks, BenchSettings, bench_context
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.reference import eager_step


def test_the_registry_is_consistent():
    names = [c.name for c in CONTENDERS]
    assert len(names) == len(set(names))
    assert COMPARE_NAMES == tuple(c.name for c in CONTENDERS if not c.selected_by)
    assert parse_compare(",".join(reversed(COMPARE_NAMES))) == COMPARE_NAMES  # canonical order: the registry's
    for contender in CONTENDERS:
        assert (contender.step is not None) == (contender.kind == STEP), contender.name
        assert (contender.calls is not None) == (contender.kind == GENERATE), contender.name
        assert contender.chosen_as in COMPARE_NAMES
        if contender.replays_graphs or contender.needs_graphs:  # torch.compile's trees break our graphs
            assert contender.tier < Tier.TORCH_COMPILE, contender.name


def _twice(graphs, batch: int, rewind) -> TimedStep:
    """A made-up contender: two eager steps per call, from the same cache state."""

    def call(tokens, positions):
        eager_step(graphs.session, tokens, positions)
        rewind()
        return eager_step(graphs.session, tokens, positions)

    return TimedStep("twice", call, setup_seconds=0.25)


TWICE = Contender(
    "twice",
    Tier.TORCH_COMPILE,  # runs after every contender of ours
    color="tab:gray",
    step=_twice,
    columns=(SetupColumn("twice\nsetup s", lambda row: f"{row.setup_seconds:.2f}", summed=True),),
)


@pytest.fixture
def with_twice(monkeypatch):
    """The one registry line a new contender needs, made for this test only."""
    monkeypatch.setattr(registry, "CONTENDERS", (*CONTENDERS, TWICE))
    monkeypatch.setattr(cli.bench_tables, "CONTENDERS", (*CONTENDERS, TWICE))


def test_a_new_contender_needs_only_its_registry_entry(with_twice):
    prepared = prepare(CaptureRequest(model="tiny", device="cpu", buckets=(1, 2), max_cache_len=32))
    settings = BenchSettings(compare=("eager", "graph", "twice"), steps=5, warmup=1)
    bandwidth = Bandwidth(2e10, 2**28, 5, "host copy")
    info, rows = bench_context(prepared, settings, bandwidth, BenchHooks())
    assert [(r.contender, r.batch) for r in rows] == [
        ("eager", 1),
        ("graph", 1),
        ("eager", 2),
        ("graph", 2),
        ("twice", 1),  # its tier: after ours
        ("twice", 2),
    ]
    fill_speedups(rows)
    twice = [r for r in rows if r.contender == "twice"]
    assert all(r.kind == STEP and r.setup_seconds == 0.25 and r.speedup is not None for r in twice)
    report = BenchReport({"gpu": "none"}, bandwidth, {}, [info], rows)
    table = cli.bench_tables.step_table(report, 32)
    headers = [column.header for column in table.columns]
    assert headers[-3:] == ["capture\nms", "graph\nMiB", "twice\nsetup s"]
    assert "twice\nvs eager" in headers
    all_row = [column._cells[-1] for column in table.columns]
    assert all_row[0] == "all" and all_row[-1] == "0.5"  # its setup summed over both batches
    assert int(prepared.session.kv.positions()[0]) == 0  # the cache is left reset


def test_an_eager_plan_names_the_contenders_that_need_graphs():
    from accelerate_graph.common.errors import CpuTimingRefused

    prepared = prepare(CaptureRequest(model="tiny", device="cpu", buckets=(1,), max_cache_len=32, mode="eager"))
    settings = BenchSettings(compare=("eager", "graph", "hf-generate"), steps=5, warmup=1)
    with pytest.raises(CpuTimingRefused, match=r"no graph to time \(graph, hf-generate\)"):
        bench_context(prepared, settings, Bandwidth(2e10, 2**28, 5, "host copy"), BenchHooks())
