"""profile_step.py --fp8-ops's parts (tune/fp8_ops.py): the products of a layer as the fused FP8 step calls them,
and the loads-alone kernel reading every word of the tiles a config walks (in a fresh process: under the Triton
interpreter, whose switch must be on before triton is imported, or compiled on a GPU), so its time is a whole
walk's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")  # fp8_ops holds a Triton kernel

from accelerate_graph.tune.fp8_ops import OpCall, layer_ops  # noqa: E402
from accelerate_graph.tune.model_shapes import layer_shapes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_a_layers_products_each_shape_once_with_the_steps_folds():
    assert layer_ops(layer_shapes("llama-3.1-8b"), None) == [
        OpCall("qkv", 6144, 4096, "norm", False),
        OpCall("o", 4096, 4096, "residual", False),
        OpCall("gate_up", 28672, 4096, "norm", True),  # gate's rows, then up's; silu(gate) * up out
        OpCall("down", 4096, 14336, "residual", False),
    ]
    tiny = layer_ops(layer_shapes("tiny"), 128)  # block scales keep q/k/v apart; o has q's shape: once
    assert [(op.name, op.n, op.k, op.fold) for op in tiny] == [
        ("q", 128, 128, "norm"), ("k", 64, 128, "norm"), ("gate_up", 512, 128, "norm"), ("down", 128, 256, "residual")
    ]  # fmt: skip
    assert tiny[2].outputs == 256 and tiny[0].outputs == 128


CHECK = """
import torch
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.fp8_ops import stream

device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(0)
# 40 rows x 200: neither a multiple of the tiles (masked loads); 32 x 256: both (`EVEN`, unmasked)
for rows, k, cfgs in (
    (40, 200, (SkinnyConfig(16, 32, split_k=1), SkinnyConfig(16, 32, split_k=3), SkinnyConfig(1, 64))),
    (32, 256, (SkinnyConfig(16, 64, split_k=2), SkinnyConfig(32, 32, num_stages=3))),
):
    words = torch.randint(-2**31, 2**31 - 1, (2 * rows, k // 4), generator=gen, dtype=torch.int32)
    weight = words.to(device).view(torch.float8_e4m3fn)
    for paired in (False, True):
        for cfg in cfgs:
            w = weight if paired else weight[:rows]
            got = stream(w, cfg, paired).cpu()
            step = cfg.block_k // 4
            per_split = -(-(-(-(k // 4) // cfg.split_k)) // step) * step
            for s in range(got.shape[0]):
                cols = words[:rows, s * per_split : min((s + 1) * per_split, k // 4)]
                if paired:
                    cols = cols ^ words[rows:, s * per_split : min((s + 1) * per_split, k // 4)]
                want = torch.zeros(rows, step, dtype=torch.int32)
                for j in range(cols.shape[1]):
                    want[:, j % step] ^= cols[:, j]
                assert torch.equal(got[s], want), (rows, k, paired, cfg, s)
print("every word read")
"""


def test_the_loads_alone_kernel_reads_every_word_of_its_tiles():
    """Interpreted where no GPU is; compiled on one (the pipelined loop is what a GPU runs)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "every word read" in done.stdout, done.stderr[-3000:]
