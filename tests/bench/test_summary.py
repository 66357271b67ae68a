"""benchmarks/bench_lines.py, which the one-call GPU scripts end with: it reads what `bench --csv` writes."""

import subprocess
import sys
from pathlib import Path

from accelerate_graph.bench.report_files import CSV_COLUMNS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_lines.py"


def test_it_reads_columns_bench_writes():
    assert {"kind", "bucket", "contender", "median_ms", "floor_ms"} <= set(CSV_COLUMNS)


def test_one_line_per_step_row_with_its_multiple_of_the_floor(tmp_path):
    csv = tmp_path / "bench-8b.csv"
    csv.write_text(
        "kind,context,bucket,contender,median_ms,floor_ms\n"
        "step,1024,1,fused,4.241,3.537\n"
        "generate,1024,1,fused,90.0,3.537\n"
        "step,1024,32,compile,15.125,3.662\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(csv), str(tmp_path / "missing.csv")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == [
        "8b    fused    batch  1: 4.241 ms (1.199x floor)",
        "8b    compile  batch 32: 15.125 ms (4.130x floor)",
    ]


def test_each_contenders_setup_is_summed_over_its_buckets(tmp_path):
    csv = tmp_path / "bench-1b.csv"
    csv.write_text(
        "kind,context,bucket,contender,median_ms,floor_ms,setup_seconds\n"
        "step,16384,1,fused,0.785,0.587,9.04\n"
        "step,16384,8,fused,0.968,0.594,1.7\n"
        "step,16384,1,compile,0.9,0.587,80.0\n",
        encoding="utf-8",
    )
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-2:] == [
        "1b    fused    setup 10.7 s (1: 9.0, 8: 1.7)",
        "1b    compile  setup 80.0 s (1: 80.0)",
    ]
