"""Every Triton kernel variant compiles for the H200 (sm_90) here, without a GPU, and the FP8 kernel's launched
tiles for Ada (sm_89), FP8's other GPUs.

The interpreter runs kernels as Python, so it misses what only the compiler rejects: a launch on the
H200 once failed for every shape because constexprs passed through a tuple's unpacking lost their
constexpr-ness, which the interpreter never noticed (2026-11-30). `triton.compile` for a Hopper target
needs no device; it runs in a process of its own, without the interpreter the other kernel tests use.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[3]
# A bound against a hung compiler, not a speed check: a quiet 2-core machine takes minutes, a loaded one many.
WORKER_TIMEOUT_S = 3600


def test_every_kernel_variant_compiles_for_hopper():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    worker = Path(__file__).with_name("hopper_compile_worker.py")
    done = subprocess.run(
        [sys.executable, str(worker)], env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.strip().endswith("0 failed")
