"""Failures that can only happen on a GPU, each in a subprocess (a device-side assert ends the process)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from accelerate_graph.core.plan import read_plan

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]  # the repository (this file lives in tests/cli/)


def run(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CUGRAPH_ACCEL_DEBUG", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_device_side_assert_is_one_clear_line():
    result = run("tests/scripts/device_assert.py")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error: a device-side assert fired on the GPU" in result.stderr
    assert "process must end" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.alone
def test_oom_during_capture_names_the_bucket():
    result = run("tests/scripts/oom_during_capture.py")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error: out of device memory while capturing bucket 32" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.alone
def test_cache_too_large_for_the_gpu_gets_the_number(tmp_path):
    result = run(
        "-m",
        "cli",
        "capture",
        "llama-3.2-1b",  # 131072 positions: the cache is refused for memory, not for the model's limit
        "--buckets",
        "256",
        "--max-cache-len",
        "131072",
        "--plan",
        str(tmp_path / "p.yaml"),
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "needs" in result.stderr and "What fits: " in result.stderr and "--max-cache-len" in result.stderr
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("seconds", [1.0, 4.0, 8.0, 15.0])  # imports, CUDA init, loading, capturing
def test_ctrl_c_at_any_moment_of_a_gpu_capture_exits_130(tmp_path, seconds):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plan = tmp_path / "p.yaml"
    child = subprocess.Popen(
        [sys.executable, "-m", "cli", "capture", "qwen2.5-0.5b", "--buckets", "1,8,32", "--plan", str(plan)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(seconds)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    if child.returncode == 0:
        pytest.skip(f"the capture finished within {seconds} s")
    assert child.returncode in (130, -signal.SIGINT), err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    # an interrupt after the plan's rename (while printing or exiting) leaves it whole, never a part of one
    if plan.exists():
        read_plan(plan)
    assert not list(tmp_path.glob(".p.yaml.*.tmp"))
