"""benchmarks/serve_load.py end to end on the tiny recipe (CPU): the server mode against its own server
process, with the server's count of steps from /metrics, and the engine mode beside it; so a GPU run of the
serve suite does not spend its device time on a broken tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_server_and_engine_modes_report_their_rows(tmp_path):
    out = tmp_path / "load.json"
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "serve_load.py"),
        "recipes/tiny.yaml",
        "--modes",
        "server,engine",
    ]
    command += ["--clients", "1,2", "--per-client", "1", "--prompt-len", "8", "--output-len", "6"]
    command += ["--max-cache-len", "64", "--client-processes", "2", "--json", str(out)]  # 2 clients: 2 processes
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text(encoding="utf-8"))
    server, engine = results["server"], results["engine"]
    assert [r["clients"] for r in server] == [1, 2] and [r["clients"] for r in engine] == [1, 2]
    for r in server:
        assert r["requests"] == r["clients"] and 0 < r["tokens"] <= 6 * r["clients"]
        assert r["decode_steps"] > 0 and r["decode_step_ms"] > 0 and r["prefills"] >= 1
        assert r["decode_device_ms"] == 0 and 0 <= r["engine_wait_share"] <= 1  # no device timing on a CPU
    for r in engine:
        assert r["tokens"] == 6 * r["clients"] and r["itl_ms_p50"] > 0  # a prefill's token, then 5 steps
        assert r["prefill_forwards"] == 1 and 0 < r["prefill_issue_ms"] <= r["ttft_ms_p50"]  # 2 prompts of 8: one
    assert "the server's own count" in done.stdout


def test_a_request_past_the_cache_or_an_unknown_model_is_one_line():
    script = [sys.executable, str(REPO / "benchmarks" / "serve_load.py")]
    lengths = ["--prompt-len", "60", "--output-len", "8", "--max-cache-len", "64"]
    done = subprocess.run([*script, "recipes/tiny.yaml", *lengths], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "does not fit a cache of 64 slots" in done.stderr.splitlines()[-1]
    done = subprocess.run(
        [*script, "no-such-model", "--modes", "engine"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("serve_load.py: ") and len(done.stderr.splitlines()) == 1, done.stderr
