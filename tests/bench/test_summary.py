"""benchmarks/summary.py, the tables benchmarks/gpu.sh ends with: it reads what bench, verify and pytest write."""

import json
import subprocess
import sys
from pathlib import Path

from accelerate_graph.bench.report_files import CSV_COLUMNS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "summary.py"


def summary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_it_reads_columns_bench_writes():
    assert {"kind", "context", "bucket", "contender", "median_ms", "floor_ms", "setup_seconds"} <= set(CSV_COLUMNS)


def test_one_line_per_cache_and_batch_with_each_contender_and_the_last_ones_multiple_of_the_floor(tmp_path):
    csv = tmp_path / "bench-llama-3.1-8b.csv"
    csv.write_text(
        "kind,context,bucket,contender,median_ms,floor_ms\n"
        "step,1024,1,graph,5.102,3.537\n"
        "step,1024,1,fused,4.241,3.537\n"
        "generate,1024,1,fused,90.0,3.537\n"
        "step,1024,32,graph,15.125,3.662\n",
        encoding="utf-8",
    )
    done = summary("bench", str(csv), str(tmp_path / "bench-missing.csv"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "model            cache batch    graph ms    fused ms  floor ms   fused x floor",
        "llama-3.1-8b      1024     1       5.102       4.241     3.537           1.199",
        "llama-3.1-8b      1024    32      15.125           -     3.662               -",
        f"{tmp_path / 'bench-missing.csv'}: missing",
    ]


def test_each_contenders_setup_is_summed_over_its_buckets_unrounded(tmp_path):
    csv = tmp_path / "bench-1b.csv"
    csv.write_text(
        "kind,context,bucket,contender,median_ms,floor_ms,setup_seconds\n"
        "step,16384,1,fused,0.785,0.587,9.04\n"
        "step,16384,8,fused,0.968,0.594,1.74\n"
        "step,16384,1,compile,0.9,0.587,80.0\n",
        encoding="utf-8",
    )
    lines = summary("bench", str(csv)).stdout.splitlines()
    assert lines[-2:] == ["1b fused setup 10.8 s (1: 9.0, 8: 1.7)", "1b compile setup 80.0 s (1: 80.0)"]


def test_no_bench_file_is_said_not_a_crash(tmp_path):
    done = summary("bench")
    assert done.returncode == 0 and done.stdout.startswith("no bench results")


def test_verify_repeats_passed_worst_error_memory_beside_its_bound_and_time(tmp_path):
    repeats = [{"failed": 0, "worst_ratio": 1.16}, {"failed": 2, "worst_ratio": 3.5}]
    memory = {"peak_bytes": 40 * 2**30, "bound_bytes": 44 * 2**30}
    seconds = {"eager": 141.1, "float32 reference": 209.4, "judging": 17.5}
    big = {"repeats": repeats, "memory": memory, "seconds": seconds, "reference": {"steps_a_forward": 16}}
    (tmp_path / "verify-llama-3.1-8b-4096.json").write_text(json.dumps(big))
    (tmp_path / "verify-tiny-64.json").write_text(json.dumps({"repeats": [], "memory": None}))
    lines = summary("verify", str(tmp_path)).stdout.splitlines()
    assert lines[1].split() == ["llama-3.1-8b-4096", "1", "of", "2", "3.50", "40.0", "44.0", "368", "209", "16"]
    assert lines[2].split() == ["tiny-64", "0", "of", "0", "nan", "-", "-", "0", "-", "-"]


def test_pytest_logs_give_their_failures_and_closing_line(tmp_path):
    log = tmp_path / "tests.log"
    log.write_text(
        "...F.s\nFAILED tests/x.py::test_y - AssertionError\n0.5s call tests/x.py::test_y\n"
        "1 failed, 4 passed, 265 skipped, 939 deselected in 19.17s\n"
    )
    quiet = tmp_path / "faults.log"
    quiet.write_text("ssss\n4 skipped in 2.01s\n")
    lines = summary("pytest", str(log), str(quiet), str(tmp_path / "cut.log")).stdout.splitlines()
    assert lines == [
        "FAILED tests/x.py::test_y - AssertionError",
        "tests: 1 failed, 4 passed, 265 skipped, 939 deselected in 19.17s",
        "faults: 4 skipped in 2.01s",
        "cut.log: missing",
    ]


def test_generate_speeds_against_hf_and_the_first_token_of_a_new_process(tmp_path):
    rows = [
        {"kind": "generate", "contender": "hf-generate", "bucket": 1, "tokens_per_s": 500.0},
        {"kind": "generate", "contender": "generate", "bucket": 1, "tokens_per_s": 1500.0},
        {"kind": "step", "contender": "graph", "bucket": 1, "tokens_per_s": 9.0},
    ]
    (tmp_path / "generate-bench.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "first-token.json").write_text(json.dumps({"1": {"exit": 0, "first_token_s": 3.2}}))
    lines = summary("generate", str(tmp_path)).stdout.splitlines()
    assert lines[1].split() == ["1", "500", "1,500", "(3.00x)", "3.2"]


def test_agreement_one_line_per_pair_of_each_model(tmp_path):
    from dataclasses import asdict

    from accelerate_graph.eval.agreement import compare

    pairs = [compare([[1, 2, 3, 4]], [[1, 2, 9, 4]], ("graphs-bf16", "hf-bf16")), compare([[1]], [[1]], ("a", "b"))]
    report = {"new_tokens": 4, "pairs": [asdict(pair) for pair in pairs]}
    (tmp_path / "agreement-gemma2-sliding.json").write_text(json.dumps(report))
    (tmp_path / "agreement-broken.json").write_text("{")
    lines = summary("agreement", str(tmp_path)).stdout.splitlines()
    assert lines[1].split() == ["broken", "unreadable"]
    assert lines[2].split() == ["gemma2-sliding", "graphs-bf16", "vs", "hf-bf16", "75.0%", "2.0", "of", "4"]
    assert lines[3].split()[-4:] == ["100.0%", "1.0", "of", "4"]
    assert summary("agreement", str(tmp_path / "none")).stdout.startswith("no agreement results")


def test_an_unknown_kind_is_one_usage_line_and_exit_2():
    done = summary("benches", "x")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "usage" in done.stderr


def test_tune_a_line_per_bucket_then_each_ops_fastest_of_each_tile_kind(tmp_path):
    from accelerate_graph.fused.kernels.configs import SkinnyConfig
    from accelerate_graph.tune.model_shapes import layer_shapes
    from accelerate_graph.tune.run import TuneReport
    from accelerate_graph.tune.sweep import BucketResult

    plain, staged = SkinnyConfig(4, 1024), SkinnyConfig(64, 256, num_warps=8, num_stages=3, staged=True)
    e4m3 = SkinnyConfig(64, 128, num_stages=4, dot=True, e4m3_dot=True)
    apart = SkinnyConfig(64, 128, num_stages=4, dot=True, e4m3_dot=True, x_apart=True)
    one = BucketResult(1, {"down": plain}, {"down": staged}, 50.0, 45.5, None, {"down": "fp8_channel|1"})
    one.trials = [("down", staged, 45.5), ("down", SkinnyConfig(2, 2048), 48.25), ("down", plain, None)]
    one.seconds, one.trial_seconds = 61.04, [2.5, 0.25, 0.5]
    eight = BucketResult(8, {"gate_up": e4m3}, {"gate_up": apart}, 30.0, 28.0, None, {"gate_up": "k"})
    eight.trials = [("gate_up", apart, 28.0), ("gate_up", e4m3, 29.5), ("gate_up", apart, 27.9)]
    report = TuneReport("NVIDIA H200", layer_shapes("tiny"), [one, eight], tmp_path / "t.json", weights="fp8")
    report.compile_workers = 12
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(report.to_dict()), encoding="utf-8")
    done = summary("tune", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tiny, weights fp8, 12 compile workers",
        "rows  seconds  tried  refused  s a trial  before us  chosen us",
        "   1     61.0      3        1       0.50      50.00      45.50",
        "   8      0.0      3        0          -      30.00      28.00",
        "   1 down: fma staged 45.50, fma 48.25",
        "   8 gate_up: dot e4m3 x-apart 27.90, dot e4m3 29.50",
    ]
    assert summary("tune", str(tmp_path / "none.json")).stdout.strip().endswith("none.json: missing")
