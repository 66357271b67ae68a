"""profile_step.py --fp8-ops's parts (tune/fp8_ops.py): the products of a layer as the fused FP8 step calls them,
and the loads-alone kernel reading every word of the tiles a config walks (under the Triton interpreter, in a
fresh process: the switch must be on before triton is imported), so its time is a whole walk's."""

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

gen = torch.Generator().manual_seed(0)
rows, k = 40, 200  # rows not a multiple of the tile; K in 50 words, not a multiple of the step
weight = torch.randint(-2**31, 2**31 - 1, (2 * rows, k // 4), generator=gen, dtype=torch.int32).view(torch.float8_e4m3fn)
words = weight.view(torch.int32)
for paired in (False, True):
    for cfg in (SkinnyConfig(16, 32, split_k=1), SkinnyConfig(16, 32, split_k=3), SkinnyConfig(1, 64)):
        w = weight if paired else weight[:rows]
        got = stream(w, cfg, paired)
        step = cfg.block_k // 4
        per_split = -(-(-(-(k // 4) // cfg.split_k)) // step) * step
        for s in range(got.shape[0]):
            cols = words[:rows, s * per_split : min((s + 1) * per_split, k // 4)]
            if paired:
                cols = cols ^ words[rows:, s * per_split : min((s + 1) * per_split, k // 4)]
            want = torch.zeros(rows, step, dtype=torch.int32)
            for j in range(cols.shape[1]):
                want[:, j % step] ^= cols[:, j]
            assert torch.equal(got[s], want), (paired, cfg, s)
print("every word read")
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where no GPU is")
def test_the_loads_alone_kernel_reads_every_word_of_its_tiles_interpreted():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "every word read" in done.stdout, done.stderr[-3000:]
