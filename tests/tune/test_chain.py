"""What `tune` times computes what the step computes: the chain on the skinny kernels (configs from both ends of
the grids) agrees with its torch twin, the way inductor runs it. On the CPU the Triton interpreter runs one row
(its tensor-core dot is not the GPU's), in a fresh process: the switch must be on before triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import torch
from accelerate_graph.tune import grids
from accelerate_graph.tune.chain import Chain, layers_for
from accelerate_graph.tune.model_shapes import layer_shapes
from accelerate_graph.tune.sweep import table_configs

shapes = layer_shapes("tiny")
assert layers_for(shapes) == 32  # tiny layers: the most a chain holds
for rows in ROWS:
    chain = Chain(shapes, rows, torch.device(DEVICE), layers=1)
    want = chain.torch_chain(chain.x, chain.attention)[0].float()
    base = table_configs(shapes, rows, 132)
    tries = [base] + [{**base, op: grids.grid(rows, sum(shapes.calls[op][1]), shapes.calls[op][2])[i]}
                      for op in ("gate_up", "down") for i in (0, -1)]
    for cfgs in tries:
        got = chain.run(cfgs).float()
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err < 0.03, (rows, cfgs, err)
print("chains agree")
"""


def check(device: str, rows: tuple[int, ...], interpret: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"TRITON_INTERPRET": "1"} if interpret else {})}
    script = f"DEVICE, ROWS = {device!r}, {rows!r}\n" + CHECK
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and "chains agree" in done.stdout, done.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where no GPU is")
def test_the_one_row_chain_agrees_with_its_torch_twin_interpreted():
    pytest.importorskip("triton")
    check("cpu", (1,), interpret=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_chain_agrees_with_its_torch_twin_on_the_gpu():
    check("cuda", (1, 8, 32), interpret=False)
