"""`cugraph-accel serve` as a user meets it: its options in --help, and one line saying how to install the
`serve` extra when its packages are missing (before any model loads)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, str(ROOT)) if p), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, timeout=120)


def test_help_names_the_server_options():
    done = _cli("serve", "--help")
    assert done.returncode == 0
    for flag in ("--plan", "--fuse", "--host", "--port", "--max-batch", "--queue", "--drain-s", "--prefill-chunk"):
        assert flag in done.stdout


def test_without_fastapi_one_line_says_how_to_install_the_extra(tmp_path):
    blocked = tmp_path / "fastapi"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('fastapi is not installed here')\n")
    done = _cli("serve", "tiny", path=str(tmp_path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "fastapi" in lines[0] and "pip install 'cugraph-accel[serve]'" in lines[0]
    assert "loading" not in done.stdout


def test_more_requests_at_once_than_the_largest_bucket_is_one_line_before_any_load():
    done = _cli("serve", "tiny", "--buckets", "1,2", "--max-batch", "4")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--max-batch 4 is more than the largest bucket (2)" in lines[0]
    assert "loading" not in done.stdout and "model" not in done.stdout
