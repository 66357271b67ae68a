"""Run the CLI (or a test script) in a fresh process and time when its last line came and when it ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    exit_after_last_line_s: float  # from the last line written to the process's end


def run(args: list[str], env: dict | None = None, timeout: float = 600) -> Run:
    # the bound is against a hang: two ranks on a shared two-core machine take minutes, not seconds
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    environ.pop("CUGRAPH_ACCEL_DEBUG", None)
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, last = [], time.monotonic()
    deadline = last + timeout
    for line in process.stdout:  # stdout and stderr merged: the last line of either counts
        lines.append(line)
        last = time.monotonic()
        if last > deadline:
            process.kill()
            break
    code = process.wait(timeout=max(deadline - time.monotonic(), 1))
    ended = time.monotonic()
    text = "".join(lines)
    return Run(code, text, text, ended - last)


def cli(*args: str, env: dict | None = None) -> Run:
    return run(["-m", "cli", *args], env)
