"""bench's generate contenders (generate, drop-in, hf-eager) on the CPU emulation: one row each per
batch, exactly the requested new tokens, setup including the capture, and their table."""

from __future__ import annotations

from accelerate_graph.bench.floor import Bandwidth
from accelerate_graph.bench.options import parse_compare
from accelerate_graph.bench.results import GENERATE, BenchReport
from accelerate_graph.bench.run import BenchHooks, BenchSettings, bench_context
from accelerate_graph.pipeline import CaptureRequest, prepare
from cli.generate_bench_table import end_to_end_table


def test_generate_contenders_make_one_row_each_and_leave_the_model_as_it_was():
    prepared = prepare(CaptureRequest(model="tiny", device="cpu", buckets=(1, 2), max_cache_len=32, contexts=()))
    model = prepared.session.model
    compare = parse_compare("hf-eager,drop-in,generate")
    settings = BenchSettings(compare=compare, steps=5, warmup=1, new_tokens=4)
    info, rows = bench_context(prepared, settings, Bandwidth(2e10, 2**28, 5, "host copy"), BenchHooks())
    assert [(r.contender, r.batch) for r in rows] == [
        (name, batch) for batch in (1, 2) for name in ("generate", "drop-in", "hf-eager")
    ]
    assert all(r.kind == GENERATE and r.new_tokens == 4 and r.setup_seconds > 0 for r in rows)
    drop_in = [r for r in rows if r.contender == "drop-in"]
    generate = [r for r in rows if r.contender == "generate"]
    assert all(d.setup_seconds > d.median_ms * 4 / 1000 for d in drop_in)  # its own capture is in its setup
    assert all(g.setup_seconds >= prepared.graphs.bucket_seconds(g.batch) for g in generate)
    assert not {"forward", "generate", "prepare_inputs_for_generation"} & set(model.__dict__)  # undone
    table = end_to_end_table(BenchReport({"gpu": "none"}, None, {}, [info], rows), 32)
    assert [c.header for c in table.columns][2:4] == ["HF eager\nfirst s", "HF eager\ntok/s"]
    assert len(table.rows) == 2


def test_drop_in_fused_makes_its_rows_with_the_compile_in_its_setup():
    """drop-in-fused: accelerate(fuse=True) then HF generate(); inductor's CPU code here. Its rows come
    after the plan's graphs ran, and the model is left as it was."""
    prepared = prepare(CaptureRequest(model="tiny", device="cpu", buckets=(2,), max_cache_len=32, contexts=()))
    model = prepared.session.model
    settings = BenchSettings(compare=parse_compare("generate,drop-in-fused"), steps=5, warmup=1, new_tokens=4)
    info, rows = bench_context(prepared, settings, Bandwidth(2e10, 2**28, 5, "host copy"), BenchHooks())
    assert [(r.contender, r.batch) for r in rows] == [("generate", 2), ("drop-in-fused", 2)], info.notes
    fused = rows[1]
    assert fused.kind == GENERATE and fused.new_tokens == 4 and fused.setup_seconds > 0
    assert not {"forward", "generate", "prepare_inputs_for_generation"} & set(model.__dict__)  # undone
    table = end_to_end_table(BenchReport({"gpu": "none"}, None, {}, [info], rows), 32)
    assert any("drop-in" in c.header and "fuse" in c.header for c in table.columns)
