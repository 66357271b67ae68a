"""The bench library on the CPU: option parsing, timing statistics, the hardware floor's arithmetic,
the report writers, the plot, and the HF generate contender on the tiny recipe."""

from __future__ import annotations

import builtins
import csv
import json

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph.bench.floor import Bandwidth, StepBytes, floor_ms, measure_bandwidth, step_bytes, weight_bytes
from accelerate_graph.bench.generate import bench_hf_generate, bench_our_loop, new_token_budget
from accelerate_graph.bench.options import DEFAULT_COMPARE, parse_cache_lengths, parse_compare
from accelerate_graph.bench.plot import require_matplotlib, write_plot
from accelerate_graph.bench.report_files import CSV_COLUMNS, csv_text, write_csv, write_json
from accelerate_graph.bench.results import GENERATE, STEP, BenchReport, BenchRow, ContextInfo, fill_speedups
from accelerate_graph.bench.run import context_request
from accelerate_graph.bench.timing import Latency
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.pipeline import CaptureRequest, prepare

CPU = torch.device("cpu")

# ------------------------------------------------------------------------------------------------ options


def test_compare_default_and_canonical_order():
    assert DEFAULT_COMPARE == ("eager", "graph")
    assert parse_compare("hf-generate,graph,EAGER, compile") == ("eager", "graph", "compile", "hf-generate")


@pytest.mark.parametrize(
    "text, phrase",
    [("eager,bogus", "'bogus'"), ("eager,,graph", "empty item"), ("", "empty item"), ("graph,graph", "twice")],
)
def test_bad_compare(text, phrase):
    with pytest.raises(BadOptionError, match=r"^compare\b") as err:
        parse_compare(text)
    assert phrase in str(err.value)


def test_contexts_sorted():
    assert parse_cache_lengths("4096, 128,1024") == (128, 1024, 4096)


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("1", "below 2"),
        ("0,128", "below 2"),
        ("12x", "'12x'"),
        ("128,,256", "empty"),
        ("", "empty"),
        ("128,128", "twice"),
        ("128,0128", "twice"),
        ("1.5", "'1.5'"),
    ],
)
def test_bad_contexts(text, phrase):
    with pytest.raises(BadOptionError, match=r"^context\b") as err:
        parse_cache_lengths(text)
    assert phrase in str(err.value)


def test_context_request_cuts_a_plan_prompt_to_half_the_cache():
    request = CaptureRequest(model="tiny", prompt_len=128, max_cache_len=1024)
    assert (context_request(request, 128).max_cache_len, context_request(request, 128).prompt_len) == (128, 64)
    assert context_request(request, 4096).prompt_len == 128
    assert context_request(CaptureRequest(model="tiny"), 64).prompt_len is None  # the recipe's default decides
    assert context_request(request, None) is request


# ------------------------------------------------------------------------------------------------- timing


def test_latency_percentiles_and_drift():
    latency = Latency.of([float(i) for i in range(1, 102)])  # 1..101
    assert latency.median_ms == 51 and latency.p10_ms == pytest.approx(11) and latency.p90_ms == pytest.approx(91)
    assert latency.samples == 101 and not latency.stable  # a steady climb: the halves disagree
    flat = Latency.of([2.0] * 20)
    assert flat.drift == 0 and flat.stable


# ------------------------------------------------------------------------------------------- the floor


def test_floor_bytes_of_the_tiny_recipe_by_hand():
    """tiny: hidden 128, intermediate 256, 2 layers, 4 heads (head_dim 32), 2 KV heads, vocab 512, untied, fp32."""
    session = DecodeSession(load_model("tiny", CPU, torch.float32).model, max_batch=2, max_cache_len=32)
    per_layer = 128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256 + 2 * 128  # q,o + k,v + gate,up,down + 2 norms
    lm_head, final_norm = 512 * 128, 128
    embedding_rows = 2 * 128  # untied input embedding: a gather of the batch's rows only
    moved = step_bytes(session, 2, slots=32)
    assert moved.weights == 4 * (2 * per_layer + final_norm + lm_head + embedding_rows)
    assert moved.kv_read == 2 * 2 * 2 * 32 * 32 * 4 * 2  # layers * (K, V) * heads * slots * dim * fp32 * batch
    assert moved.kv_written == 2 * 2 * 2 * 32 * 4 * 2  # one slot
    assert moved.total == moved.weights + moved.kv_read + moved.kv_written


def test_tied_weights_count_once():
    model = tiny_decoder("llama", num_hidden_layers=1, tie_word_embeddings=True)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    distinct = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    assert weight_bytes(model, batch=3) == sum(distinct.values())
    assert weight_bytes(model, batch=3) < sum(p.numel() * 4 for p in model.state_dict().values())


def test_floor_ms_and_a_measured_bandwidth():
    assert floor_ms(StepBytes(3_000_000, 500_000, 500_000), Bandwidth(4e12, 1, 1, "x")) == pytest.approx(0.001)
    bandwidth = measure_bandwidth(CPU, copy_bytes=8 * 2**20)
    assert bandwidth.bytes_per_s > 1e8 and "CPU" in bandwidth.method


# ---------------------------------------------------------------------------------------- report files


def _row(contender: str, bucket: int, median: float, kind: str = STEP, **extra) -> BenchRow:
    latency = Latency.of([median * 0.9, median, median * 1.1])
    return BenchRow.measured(kind, 256, 16, bucket, contender, latency, floor_ms=0.5, **extra)


def fake_report() -> BenchReport:
    rows = [
        _row("eager", 1, 20.0),
        _row("graph", 1, 4.0, setup_seconds=0.05, memory_bytes=2**20),
        _row("eager", 8, 21.0),
        _row("graph", 8, 5.0, setup_seconds=0.06, memory_bytes=2**21),
        _row("hf-generate", 1, 4.0, GENERATE, setup_seconds=30.0, new_tokens=8),
        _row("our-loop", 1, 2.0, GENERATE, setup_seconds=0.1, new_tokens=8),
    ]
    fill_speedups(rows)
    report = BenchReport(
        {"gpu": "none", "torch": "x"},
        Bandwidth(2e10, 2**28, 5, "host copy"),
        {"model": "tiny", "dtype": "float32"},
        [ContextInfo(256, 16, [1, 8], "emulated")],
        rows,
    )
    return report


def test_speedups_against_each_kinds_baseline():
    rows = {(r.contender, r.batch): r for r in fake_report().rows}
    assert rows[("graph", 1)].speedup == pytest.approx(5.0)
    assert rows[("eager", 8)].speedup == pytest.approx(1.0)
    assert rows[("our-loop", 1)].speedup == pytest.approx(2.0)  # against hf-generate
    assert rows[("graph", 8)].x_floor == pytest.approx(10.0)
    assert rows[("graph", 1)].tokens_per_s == pytest.approx(250.0)


def test_json_document(tmp_path):
    path = tmp_path / "out" / "bench.json"
    write_json(fake_report(), path)
    data = json.loads(path.read_text())
    assert data["format"] == "cugraph-accel-bench/2"
    assert data["bandwidth"]["gb_per_s"] == pytest.approx(20.0)
    assert {
        "context",
        "bucket",
        "contender",
        "median_ms",
        "p10_ms",
        "p90_ms",
        "speedup",
        "x_floor",
        "setup_seconds",
        "memory_bytes",
    } <= set(data["rows"][0])
    assert [(r["contender"], r["bucket"]) for r in data["rows"]][:2] == [("eager", 1), ("graph", 1)]
    assert sorted(p.name for p in path.parent.iterdir()) == ["bench.json"]


def test_csv_rows_are_flat(tmp_path):
    path = tmp_path / "bench.csv"
    write_csv(fake_report(), path)
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == CSV_COLUMNS
    assert len(rows) == 6 and rows[0]["setup_seconds"] == "" and rows[1]["memory_bytes"] == str(2**20)
    assert float(rows[1]["speedup"]) == pytest.approx(5.0)
    assert csv_text(fake_report()) == path.read_text()


# ---------------------------------------------------------------------------------------------- the plot


@pytest.fixture
def no_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_plot_without_matplotlib_is_a_clear_error(no_matplotlib, tmp_path):
    with pytest.raises(BadOptionError, match="matplotlib") as err:
        require_matplotlib()
    assert "cugraph-accel[plot]" in str(err.value)
    with pytest.raises(BadOptionError):
        write_plot(fake_report(), tmp_path / "p.png")
    assert list(tmp_path.iterdir()) == []


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    write_plot(fake_report(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.png"]


# ------------------------------------------------------------------------------------------ hf-generate


def test_new_token_budget_fits_the_cache():
    assert new_token_budget(1024, 128, 128) == 128
    assert new_token_budget(128, 64, 128) == 65  # 64 prompt slots + 64 fed-back tokens
    assert new_token_budget(2, 1, 5) == 2


def test_generate_contender_on_tiny():
    prepared = prepare(CaptureRequest(model="tiny", device="cpu", buckets=(1, 2), max_cache_len=32))
    rows = [
        bench_hf_generate(prepared.session, 2, prepared.plan.prompt_len, new_tokens=4, floor_ms=0.1),
        bench_our_loop(prepared.graphs, 2, prepared.plan.prompt_len, new_tokens=4, floor_ms=0.1),
    ]
    assert [(r.kind, r.contender, r.batch, r.new_tokens) for r in rows] == [
        (GENERATE, "hf-generate", 2, 4),
        (GENERATE, "our-loop", 2, 4),
    ]
    assert all(r.median_ms > 0 and r.setup_seconds > 0 and r.samples == 5 for r in rows)
    assert int(prepared.session.kv.positions()[0]) == 0  # the cache is left reset


def test_fused_alone_prepares_what_capture_fuse_makes_and_times_those_graphs(monkeypatch):
    """`--compare fused` alone: the plan is prepared with --fuse (no plain graphs captured before the fused
    ones: less time and memory) and the fused rows replay the plan's own graphs instead of capturing again;
    with another contender the plan is the plain one."""
    import accelerate_graph.pipeline as pipeline
    from accelerate_graph.bench.run import BenchSettings, fused_alone, run_bench

    request = CaptureRequest(model="tiny", device="cpu", buckets=(1, 2), max_cache_len=32)
    assert fused_alone(request, BenchSettings(compare=("fused",))).fuse
    assert not fused_alone(request, BenchSettings(compare=("graph", "fused"))).fuse

    def no_second_capture(*_):
        raise AssertionError("the fused contender captured again over a plan prepared with --fuse")

    monkeypatch.setattr(pipeline, "capture_fused", no_second_capture)
    report = run_bench(request, BenchSettings(compare=("fused",), steps=5, warmup=1))
    rows = [(r.contender, r.batch) for r in report.rows]
    assert rows == [("fused", 1), ("fused", 2)]
    assert report.run["attn"] == "grouped"  # the fused plan's attention, as capture --fuse writes it
    assert any("inductor compiled the decoder layers" in note for note in report.contexts[0].notes)
