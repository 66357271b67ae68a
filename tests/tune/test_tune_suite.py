"""benchmarks/gpu.sh's `tune` suite passes TUNE_WEIGHTS as --weights to tune and to the bench after it, then
benches the bf16 step beside them (a python3 first on PATH notes each command line, then runs the real one;
on the CPU every part refuses)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tune_weights_reach_the_benches_around_the_tune_then_bf16_is_benched(tmp_path):
    shim, calls = tmp_path / "bin", tmp_path / "calls.txt"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {sys.executable} "$@"\n', encoding="utf-8")
    (shim / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env |= {"TUNE_RECIPE": "tiny", "TUNE_WEIGHTS": "fp8-block", "TUNE_BUDGET": "1"}
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu.sh"), "tune"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1, done.stdout[-2000:]  # no GPU: both parts refused
    lines = calls.read_text(encoding="utf-8").splitlines()
    tune = next(number for number, line in enumerate(lines) if line.startswith("-m cli tune "))
    benches = [number for number, line in enumerate(lines) if line.startswith("-m cli bench ")]
    assert "--weights fp8-block" in lines[tune] and len(benches) == 3, lines
    assert benches[0] < tune < benches[1] < benches[2], lines  # the tables before the tune, then after it
    assert all("--weights fp8-block" in lines[number] for number in benches[:2]), lines
    assert "--weights" not in lines[benches[2]]
    assert "bench-before" in done.stdout and "bench-bf16" in done.stdout
