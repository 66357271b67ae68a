"""What `tune --weights fp8` times: the FP8 products a layer makes as the fused FP8 program makes them (merged
where the scales allow), and the chain on the FP8 kernel agreeing with its reference twin. On the CPU the
Triton interpreter runs one row (its tensor-core dot is not the GPU's), in a fresh process: the switch must be
on before triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accelerate_graph.tune.fp8_chain import Fp8Call, fp8_layers_for, program_calls, tuned_ops
from accelerate_graph.tune.model_shapes import layer_shapes

ROOT = Path(__file__).resolve().parents[2]


def test_qwens_fp8_calls_are_merged_under_either_scales():
    shapes = layer_shapes("qwen2.5-0.5b")  # q 896, k and v 128: whole 128-row blocks
    for block in (None, 128):
        steps = program_calls(shapes, block)
        assert steps == {
            "qkv": [Fp8Call("qkv", 1152, 896, "qkv")],
            "o": [Fp8Call("o", 896, 896, "o")],
            "gate_up": [Fp8Call("gate_up", 9728, 896, "gate_up")],  # gate's rows, then up's: one call
            "down": [Fp8Call("down", 896, 4864, "down")],
        }
        assert list(tuned_ops(shapes, block)) == ["gate_up", "down", "qkv", "o"]  # the most bytes first


def test_block_scales_keep_tinys_q_k_v_apart_and_calls_of_one_shape_share_an_op():
    shapes = layer_shapes("tiny")  # k and v of 64 rows: a block row would span two projections
    steps = program_calls(shapes, 128)
    assert [(c.name, c.n, c.op) for c in steps["qkv"]] == [("q", 128, "q+o"), ("k", 64, "k+v"), ("v", 64, "k+v")]
    assert steps["o"] == [Fp8Call("o", 128, 128, "q+o")]  # q's shape: one key in the table, one config
    assert tuned_ops(shapes, 128) == {"gate_up": (512, 128), "down": (128, 256), "q+o": (128, 128), "k+v": (64, 128)}
    assert [c.name for c in program_calls(shapes, None)["qkv"]] == ["qkv"]
    assert fp8_layers_for(shapes, 128) == 32  # tiny layers: the most a chain holds


CHECK = """
import torch
from accelerate_graph.quant import fp8_skinny
fp8_skinny.interpret_on_cpu = DEVICE == "cpu"
from accelerate_graph.tune import grids
from accelerate_graph.tune.fp8_chain import Fp8Chain
from accelerate_graph.tune.model_shapes import layer_shapes
from accelerate_graph import settings

shapes = layer_shapes("tiny")
for fold, block, rows in ((f, b, r) for f in FOLDS for b in BLOCKS for r in ROWS):
    with settings.use(settings.DEFAULTS.replace(fp8_fold=fold)):
        chain = Fp8Chain(shapes, block, rows, torch.device(DEVICE), layers=LAYERS)
        assert chain.folds == (fold == "on")
        want = chain.torch_chain()
        base = {op: fp8_skinny.fitted(fp8_skinny.config_named("", rows, n, k, block), block)
                for op, (n, k) in chain.ops.items()}
        tries = [base]
        for op, (n, k) in chain.ops.items():
            grid = grids.fp8_grid(rows, n, k, block)
            tries += [{**base, op: grid[0]}, {**base, op: grid[-1]}]
            for cfg in (grid[0], grid[-1]):  # the failure names the config and how far: a bound or a bug
                error = chain.error_ulps(op, cfg)
                assert error <= chain.max_ulps, (op, rows, block, grids.describe(cfg), round(error, 3))
        for cfgs in tries:  # each product within max_ulps; what the norms and SiLU make of that, this much
            got = chain.run(cfgs).float()
            err = ((got - want.float()).abs().max() / want.float().abs().max()).item()
            assert err < 0.02, (block, rows, cfgs, err)
print("chains agree")
"""


def check(device: str, rows: tuple[int, ...], interpret: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"TRITON_INTERPRET": "1"} if interpret else {})}
    # interpreted: block scales alone (q/k/v kept apart; the kernel tests cover per-channel scales), one layer;
    # the folds on, the step's way on a GPU (the kernel tests compare each fold with its unfolded sequence)
    blocks, layers, folds = ((128,), 1, ("on",)) if interpret else ((None, 128), 4, ("on",))
    script = f"DEVICE, ROWS, BLOCKS, LAYERS, FOLDS = {device!r}, {rows!r}, {blocks!r}, {layers}, {folds!r}\n" + CHECK
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and "chains agree" in done.stdout, done.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where no GPU is")
def test_the_one_row_fp8_chain_agrees_with_its_reference_twin_interpreted():
    pytest.importorskip("triton")
    check("cpu", (1,), interpret=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_fp8_chain_agrees_with_its_reference_twin_on_the_gpu():
    check("cuda", (1, 8, 16), interpret=False)


def test_the_folded_gate_up_is_its_own_op_keyed_by_its_outputs():
    shapes = layer_shapes("qwen2.5-0.5b")
    folded = program_calls(shapes, None, folds=True)
    assert folded["gate_up"] == [Fp8Call("gate_up", 9728, 896, "gate_up", gate_up=True)]
    assert folded["gate_up"][0].key == (4864, 896, True)  # silu(gate) * up: half the weight's rows out
    assert tuned_ops(shapes, None, folds=True)["gate_up"] == (4864, 896)
    from accelerate_graph.quant import fp8_skinny

    assert fp8_skinny.table_key(None, 1, 4864, 896, gate_up=True) != fp8_skinny.table_key(None, 1, 4864, 896)
