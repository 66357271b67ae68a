"""Bad input under --tp: one clear line, a non-zero exit, every rank process gone, nothing written."""

from __future__ import annotations

import os
import socket

from tp_runs import cli, run


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def test_one_rank_failing_during_capture_ends_every_rank(tiny_model_dir, tmp_path):
    plan, pids = tmp_path / "tp.plan.yaml", tmp_path / "pids"
    pids.mkdir()
    result = run(["tests/scripts/tp_rank_fails.py", tiny_model_dir("llama"), str(plan), str(pids)])
    assert result.code == 1, result.stdout[-3000:]
    errors = _error_lines(result.stdout)
    assert len(errors) == 1, result.stdout[-3000:]
    assert "rank 1" in errors[0] and "injected failure on rank 1 during capture" in errors[0]
    assert "Traceback" not in result.stdout
    assert not plan.exists()  # no plan, and no temporary file beside it
    assert list(tmp_path.iterdir()) == [pids]
    ranks = [int(p.stem) for p in pids.iterdir()]
    assert len(ranks) == 2 and all(_gone(pid) for pid in ranks)
    assert result.exit_after_last_line_s < 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_rendezvous_timeout_is_one_line(tiny_model_dir, tmp_path):
    """Inside a torchrun environment whose other rank never comes."""
    env = {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()), "CUGRAPH_ACCEL_DIST_TIMEOUT": "2",
    }  # fmt: skip
    plan = tmp_path / "p.yaml"
    result = cli("capture", tiny_model_dir("llama"), "--tp", "2", "--plan", str(plan), env=env)
    assert result.code == 1, result.stdout[-3000:]
    errors = _error_lines(result.stdout)
    assert len(errors) == 1 and "rendezvous at 127.0.0.1" in errors[0] and "timed out after 2 s" in errors[0]
    assert "CUGRAPH_ACCEL_DIST_TIMEOUT" in errors[0]
    assert not plan.exists()
