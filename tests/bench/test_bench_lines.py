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
