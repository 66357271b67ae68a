"""The FP8 sweep's configs compiled ahead by worker processes (tune/compile_ahead.py): the order they are
compiled in, the workers' plumbing (CPU, with stand-in jobs), and on a GPU that a config a worker compiled is
one the sweep's own launch loads from Triton's cache instead of compiling."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from accelerate_graph import settings
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.compile_ahead import CompileAhead, default_workers, first_round_order

ROOT = Path(__file__).resolve().parents[2]


def test_workers_leave_two_cpus_and_need_two_to_be_worth_it():
    assert default_workers(16) == 12  # at most MAX_WORKERS
    assert default_workers(8) == 6
    assert default_workers(4) == 2
    assert default_workers(3) == 0  # one worker compiles no faster than the sweep itself
    assert default_workers(1) == 0


def test_the_order_takes_every_ops_likeliest_configs_first_and_skips_where_each_starts():
    a0, a1, a2 = (SkinnyConfig(n, 128) for n in (16, 32, 64))
    b0, b1 = (SkinnyConfig(n, 256) for n in (16, 32))
    grids = {"gate_up": [a0, a1, a2], "down": [b0, b1]}
    order = first_round_order({"gate_up": a1, "down": SkinnyConfig(8, 8)}, grids.__getitem__)
    assert order == [("gate_up", a0), ("down", b0), ("gate_up", a2), ("down", b1)]


def wait_for(folder: Path, names: set[str], timeout_s: float = 120.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = {p.name for p in folder.iterdir()}
        if names <= found:
            return found
        time.sleep(0.2)
    return {p.name for p in folder.iterdir()}


def test_workers_compile_the_last_bucket_queued_under_the_run_settings_past_a_refusal(tmp_path):
    pytest.importorskip("multiprocessing")
    sys.path.insert(0, str(Path(__file__).parent))
    import compile_ahead_fakes as fakes

    jobs8 = [("gate_up", SkinnyConfig(n, 128)) for n in range(1, 41)]
    jobs32 = [("refused", SkinnyConfig(1, 128)), ("down", SkinnyConfig(2, 128)), ("down", SkinnyConfig(4, 128))]
    with settings.use(settings.DEFAULTS.replace(fp8_fold="off")):
        ahead = CompileAhead(str(tmp_path), None, torch.device("cpu"), 2, fakes.compile_job, fakes.make_chain)
    with ahead:
        ahead.queue(8, jobs8)
        ahead.queue(32, jobs32)  # before the workers are up: the 8-row bucket is left, its jobs skipped
        found = wait_for(tmp_path, {"32-down-2", "32-down-4"})
    assert {"32-down-2", "32-down-4"} <= found, found
    assert not any(name.startswith("8-") for name in found), found
    assert (tmp_path / "32-down-2").read_text() == "off"  # the settings of the run that started the workers
    assert all(not w.is_alive() for w in ahead._workers)


CACHED = """
import os, sys
from pathlib import Path
import torch
from accelerate_graph.tune import grids
from accelerate_graph.tune.fp8_chain import Fp8Chain
from accelerate_graph.tune.model_shapes import layer_shapes

def fp8_entries():
    return sorted(p.parent.name for p in Path(os.environ["TRITON_CACHE_DIR"]).rglob("fp8_*.json"))

chain = Fp8Chain(layer_shapes("llama-3.2-1b"), None, 8, torch.device("cuda"), layers=1)
op = "gate_up"
n, k = chain.ops[op]
cfg = grids.fp8_grid(8, n, k, None, 132, op in chain.gate_up_ops, op in chain.normed_ops)[INDEX]
before = fp8_entries()
if MODE == "compile":
    chain.compile_only(op, cfg)
else:
    error = chain.error_ulps(op, cfg)
    assert error <= chain.max_ulps, error
print("NEW", len(set(fp8_entries()) - set(before)))
"""


def run_cached(mode: str, index: int, cache: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_CACHE_DIR": str(cache)}
    env.pop("TRITON_INTERPRET", None)
    script = f"MODE, INDEX = {mode!r}, {index}\n" + CACHED
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split("NEW")[-1])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_config_compiled_ahead_is_what_the_sweeps_launch_loads(tmp_path):
    assert run_cached("compile", 0, tmp_path) >= 1  # the worker's compile wrote the kernels' cache entries
    assert run_cached("launch", 0, tmp_path) == 0  # the sweep's check of that config compiled nothing new
    assert run_cached("launch", 1, tmp_path) >= 1  # one no worker compiled: compiled there (the measure can fail)
