"""FP8-weight matmul (quant/): the reference, the op's contract (and its folded siblings'), the Triton kernel under
the interpreter (a child process, fp8_kernel_worker.py) and its sm_90 PTX; on a GPU, each path against the
reference, a CUDA graph's replay and torch.compile around the op."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm
from accelerate_graph.quant import fp8_matmul as fm
from accelerate_graph.quant import fp8_skinny
from accelerate_graph.quant.fp8_reference import (
    dequantize,
    error_ulps,
    gated_error_ulps,
    reference_fp8_matmul,
    reference_fp8_sums,
)

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("fp8_kernel_worker.py")
needs_triton = pytest.mark.skipif(fp8_skinny.fp8_kernels is None, reason="needs triton")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def make(m, n, k, block=None, dtype=torch.bfloat16, device="cpu", bias=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=gen) * 2).to(device, dtype)
    weight = (torch.randn(n, k, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
    shape = (n,) if block is None else (-(-n // block), -(-k // block))
    scale = (torch.rand(shape, generator=gen) * k**-0.5 / 50 + 1e-4).to(device)
    b = torch.randn(n, generator=gen).to(device, dtype) if bias else None
    return x, weight, scale, block, b


def run_worker(job: dict, interpreted: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpreted:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    done = subprocess.run(
        [sys.executable, str(WORKER)], input=json.dumps(job), env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


# ---------------------------------------------------------------- the reference


def test_dequantize_per_channel_and_per_block_with_ragged_edges():
    gen = torch.Generator().manual_seed(3)
    weight = (torch.randn(40, 72, generator=gen) * 10).to(torch.float8_e4m3fn)
    channel = torch.rand(40, generator=gen)
    assert torch.equal(dequantize(weight, channel, None), weight.float() * channel[:, None])
    blocks = torch.rand(2, 3, generator=gen)  # 32 x 32 blocks: the last row block 8 rows, the last column one 8
    expected = weight.float().clone()
    for i in range(40):
        for j in range(72):
            expected[i, j] *= blocks[i // 32, j // 32]
    assert torch.equal(dequantize(weight, blocks, 32), expected)


@pytest.mark.parametrize("block", [None, 16])
def test_the_prefill_path_dequantizes_a_piece_at_a_time_to_the_same_bits(block, monkeypatch):
    """Pieces of 32 rows (two 16-row blocks) over 72 rows, the last piece ragged: the whole weight's bits."""
    monkeypatch.setattr(fm, "DEQUANTIZE_ROWS", 32)
    x, weight, scale, block_, bias = make(5, 72, 40, block=block, bias=True)
    got = fm.dequantized_linear(x.reshape(5, 1, 40), weight, scale, block_, bias)
    expected = F.linear(x, dequantize(weight, scale, block_).to(x.dtype), bias)
    assert got.shape == (5, 1, 72) and torch.equal(got.reshape(5, 72), expected)


def test_the_op_on_the_cpu_is_the_reference_for_any_leading_shape():
    x, weight, scale, block, bias = make(6, 40, 96, block=32, bias=True)
    got = fm.fp8_matmul(x.reshape(2, 3, 96), weight, scale, block, bias)
    assert got.shape == (2, 3, 40) and got.dtype == torch.bfloat16
    assert torch.equal(got.reshape(6, 40), reference_fp8_matmul(x, weight, scale, block, bias))
    # the reference is x times the dequantized weight, rounded once
    exact = (x.double() @ dequantize(weight, scale, block).double().T + bias.double()).to(torch.bfloat16)
    assert (got.reshape(6, 40).float() - exact.float()).abs().max() <= exact.float().abs().max() * 2**-8


# test_schema compares inputs with arithmetic the CPU lacks for float8 tensors; the op mutates nothing
OPCHECKS = ("test_faketensor", "test_aot_dispatch_dynamic", "test_autograd_registration")


def test_the_op_passes_torch_library_opcheck():
    op = torch.ops.cugraph_accel.fp8_matmul.default
    x, weight, scale, block, bias = make(3, 32, 64, block=None, bias=True)
    torch.library.opcheck(op, (x, weight, scale, block, bias), test_utils=OPCHECKS)
    x, weight, scale, block, _ = make(3, 32, 64, block=16)
    torch.library.opcheck(op, (x.reshape(3, 1, 64), weight, scale, block, None), test_utils=OPCHECKS)


def test_the_folded_ops_pass_opcheck_and_on_the_cpu_are_the_unfolded_sequence():
    """fp8_norm_matmul is the norm then the op, fp8_matmul_residual the residual plus the op's rounded output,
    fp8_norm_gate_up silu(gate) * up of fp8_norm_matmul's halves: bit for bit where the kernel does not run."""
    x, weight, scale, block, bias = make(3, 32, 64, block=16, bias=True)
    norm_weight = (torch.rand(64) + 0.5).to(x.dtype)
    residual = torch.randn(3, 32).to(x.dtype)
    normed = fm.fp8_norm_matmul(x.reshape(3, 1, 64), norm_weight, 1e-5, weight, scale, block, bias)
    expected = reference_fp8_matmul(reference_rms_norm(x, norm_weight, 1e-5, "llama"), weight, scale, block, bias)
    assert normed.shape == (3, 1, 32) and torch.equal(normed.reshape(3, 32), expected)
    added = fm.fp8_matmul_residual(x, weight, scale, block, bias, residual)
    assert torch.equal(added, residual + reference_fp8_matmul(x, weight, scale, block, bias))
    gated = fm.fp8_norm_gate_up(x, norm_weight, 1e-5, weight, scale, block)
    gate, up = fm.fp8_norm_matmul(x, norm_weight, 1e-5, weight, scale, block).chunk(2, dim=-1)
    assert gated.shape == (3, 16) and torch.equal(gated, F.silu(gate) * up)
    ops = torch.ops.cugraph_accel
    for op, args in [
        (ops.fp8_norm_matmul.default, (x, norm_weight, 1e-5, weight, scale, block, bias)),
        (ops.fp8_matmul_residual.default, (x, weight, scale, block, None, residual)),
        (ops.fp8_norm_gate_up.default, (x, norm_weight, 1e-5, weight, scale, block)),
    ]:
        torch.library.opcheck(op, args, test_utils=OPCHECKS)


@pytest.mark.parametrize(
    ("call", "wording"),
    [
        (lambda x, w, s, nw, r: fm.fp8_norm_matmul(x, nw[:32], 1e-5, w, s, None), "the norm weight must be (64,)"),
        (lambda x, w, s, nw, r: fm.fp8_norm_matmul(x, nw.float(), 1e-5, w, s, None), "torch.bfloat16 on x's device"),
        (lambda x, w, s, nw, r: fm.fp8_matmul_residual(x, w, s, None, None, r[:, :16]), "the residual must be (4, 32)"),
        (lambda x, w, s, nw, r: fm.fp8_matmul_residual(x, w, s, None, None, r.half()), "the residual must be"),
        (lambda x, w, s, nw, r: fm.fp8_matmul_residual(x, w, s[:4], None, None, r), "scale must be float32"),
        (lambda x, w, s, nw, r: fm.fp8_norm_gate_up(x, nw, 1e-5, w[:31], s[:31], None), "has 2N rows; got 31"),
        (lambda x, w, s, nw, r: fm.fp8_norm_gate_up(x, nw, 1e-5, w, torch.ones(1, 2), 32), "multiple of the block 32"),
    ],
)
def test_misuse_of_the_folded_ops_is_one_line(call, wording):
    x, weight, scale, _, _ = make(4, 32, 64)
    with pytest.raises(ValueError, match=r"^[^\n]+$") as raised:
        call(x, weight, scale, torch.ones(64, dtype=x.dtype), torch.zeros(4, 32, dtype=x.dtype))
    assert wording in str(raised.value)


def test_torch_compile_keeps_the_op_in_one_graph():
    x, weight, scale, block, bias = make(4, 32, 64, block=32, bias=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=backend, fullgraph=True)
    def step(x):
        return fm.fp8_matmul(x * 2, weight, scale, block, bias) + 1

    got = step(x)
    assert len(graphs) == 1
    assert any("cugraph_accel.fp8_matmul" in str(node.target) for node in graphs[0].graph.nodes)
    assert torch.equal(got, reference_fp8_matmul(x * 2, weight, scale, block, bias) + 1)


@pytest.mark.parametrize(
    ("change", "wording"),
    [
        ({"weight": torch.zeros(32, 64, dtype=torch.bfloat16)}, "float8_e4m3fn"),
        ({"x": torch.zeros(4, 48, dtype=torch.bfloat16)}, "does not fit a weight of K=64"),
        ({"scale": torch.ones(4)}, "scale must be float32 of shape (32,)"),
        ({"block": 128, "scale": torch.ones(32)}, "scale must be float32 of shape (1, 1)"),
        ({"block": 20}, "block must be a positive multiple of 16"),
        ({"bias": torch.zeros(31, dtype=torch.bfloat16)}, "bias must have shape (32,)"),
        ({"scale": torch.ones(32, dtype=torch.float64)}, "scale must be float32"),
    ],
)
def test_misuse_is_one_line_naming_the_argument(change, wording):
    x, weight, scale, block, bias = make(4, 32, 64)
    args = {"x": x, "weight": weight, "scale": scale, "block": block, "bias": bias, **change}
    with pytest.raises(ValueError, match=r"^[^\n]+$") as raised:
        fm.fp8_matmul(**args)
    assert wording in str(raised.value)


def test_a_non_contiguous_weight_is_refused():
    x, weight, scale, _, _ = make(4, 32, 64)
    with pytest.raises(ValueError, match="contiguous"):
        fm.fp8_matmul(x[:, :32], weight[:, ::2], scale, None)


# ---------------------------------------------------------------- configs


def test_configs_fit_the_scale_blocks():
    wide = configs.SkinnyConfig(256, 256, dot=True)
    assert fp8_skinny.fitted(wide, None) == wide
    fitted = fp8_skinny.fitted(wide, 128)
    assert (fitted.block_n, fitted.block_k) == (128, 128)  # a program's rows and a tile's columns in one block
    fma = fp8_skinny.fitted(configs.SkinnyConfig(64, 256), 48)
    assert (fma.block_n, fma.block_k) == (16, 256)  # without tensor cores a tile may span blocks of columns


# one-row shapes of Llama-3.2-1B and Llama-3.1-8B (q, k/v, o, gate/up, down): N, K
ONE_ROW_SHAPES = [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (4096, 4096), (1024, 4096), (14336, 4096)]


@pytest.mark.parametrize("n, k", [*ONE_ROW_SHAPES, (4096, 14336)])
@pytest.mark.parametrize("m", [1, 2])
def test_default_configs_keep_enough_weight_bytes_in_flight_at_few_rows(m, n, k):
    """A loop without tl.dot keeps one tile in flight: the default gives each multiprocessor several programs,
    each streaming weight rows of 2 KB, within the float32 products a thread can hold."""
    cfg = fp8_skinny.default_config(m, n, k, sms=132)
    programs = -(-n // cfg.block_n)
    assert not cfg.dot and cfg.split_k == 1 and cfg.block_k == min(k, fp8_skinny.FMA_TILE_BYTES)
    assert programs >= min(n, fp8_skinny.FMA_PROGRAMS_PER_SM * 132)
    assert m * cfg.block_n * cfg.block_k <= 64 * 32 * cfg.num_warps
    assert programs * cfg.block_n * cfg.block_k >= min(n * k, 1 << 20)  # at least 1 MB in flight


def test_default_configs_above_two_rows_run_tensor_cores_and_split_long_k():
    sixteen = fp8_skinny.default_config(16, 4096, 4096)  # 64 programs of 64 columns: K split in 3
    assert sixteen.dot and not sixteen.swap and sixteen.block_m(16) == 16 and sixteen.split_k == 3
    few_columns = fp8_skinny.default_config(8, 1024, 4096)  # 16 programs of 64 columns: K split in 4
    assert few_columns.dot and few_columns.split_k == 4
    short_k = fp8_skinny.default_config(1, 896, 896)  # a K tile past K's end is masked, never a second tile
    assert short_k.block_k == 1024 and not short_k.dot


def test_tables_are_read_per_gpu_name_user_over_shipped(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name = fp8_skinny.table_file_name("NVIDIA H200")
    assert name == "fp8-NVIDIA_H200.json"
    key = configs.table_key("fp8_block", 8, (4096,), 14336)
    entry = {"block_n": 32, "block_k": 128, "num_warps": 8, "num_stages": 3, "split_k": 2, "dot": True}
    folder = configs.user_tables_dir()
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps({"entries": {key: entry}}))
    fp8_skinny.forget_tables()
    try:
        assert fp8_skinny._entries("NVIDIA H200")[key] == configs.SkinnyConfig(**entry)
    finally:
        fp8_skinny.forget_tables()


def test_every_shipped_fp8_table_names_its_device_and_holds_what_tune_tries():
    """A shipped table reads, is named by its device, and holds only configs `tune --weights fp8` tries for its
    key's shape: re-tuning on that GPU can find each again."""
    from accelerate_graph.tune import grids

    shipped = sorted(fp8_skinny.SHIPPED_DIR.glob("fp8-*.json"))
    assert [p.name for p in shipped] == ["fp8-NVIDIA_H100_80GB_HBM3.json", "fp8-NVIDIA_H200.json"]
    for path in shipped:
        body = json.loads(path.read_text(encoding="utf-8"))
        assert fp8_skinny.table_file_name(body["device"]) == path.name
        entries = configs.read_table(path)
        assert entries
        for key, cfg in entries.items():
            op, bucket, n, k = key.split("|")
            block = None if op.startswith("fp8_channel") else 128
            rows, gate_up = int(bucket[1:]), op.endswith("_gate_up")
            # a key does not say whether its op folds the norm in (q/k/v does, o of the same shape does not)
            tried = {
                cfg for normed in (False, True)
                for cfg in grids.fp8_grid(rows, int(n[1:]), int(k[1:]), block, gate_up=gate_up, normed=normed)
            }  # fmt: skip
            assert cfg in tried, key


# ---------------------------------------------------------------- the kernel under the interpreter

FMA = {"block_n": 16, "block_k": 32}
CASES = [  # N and K not multiples of the tiles nor of the 32 x 32 scale blocks
    *(
        {"id": f"fma-bf16-{scales}-rows{rows}", "rows": rows, "n": 40, "k": 72, "dtype": "bf16",
         "block": block, "bias": rows % 2 == 1, "config": FMA}
        for rows in (1, 2, 3, 8, 16)
        for scales, block in (("channel", None), ("block", 32))
    ),
    *(
        {"id": f"{path}-fp32-{scales}-rows{rows}", "rows": rows, "n": 40, "k": 72, "dtype": "fp32",
         "block": block, "bias": True, "config": {"block_n": 16, "block_k": 32, "dot": True, "swap": path == "swap"}}
        for rows in (1, 5, 16)
        for path in ("dot", "swap")
        for scales, block in (("channel", None), ("block", 32))
    ),
    # fp16: the tensor cores' own input conversion (the interpreter's tl.dot gets bf16 wrong, fp8_skinny says)
    *(
        {"id": f"{path}-fp16-{scales}-rows{rows}", "rows": rows, "n": 40, "k": 72, "dtype": "fp16",
         "block": block, "bias": True, "config": {"block_n": 16, "block_k": 32, "dot": True, "swap": path == "swap"}}
        for rows in (3, 4, 16, 32, 64)  # 32 and 64: every decode batch, one and two 32-row blocks
        for path in ("dot", "swap")
        for scales, block in (("channel", None), ("block", 32))
    ),
    # e4m3 tensor cores (e4m3_dot): x split exactly into two e4m3 terms where a row's values lie within 2^-13 of
    # its largest (x_spread 14), the smallest flushed into the second term beyond (x_spread 24)
    *(
        {"id": f"e4m3-{path}-{scales}-rows{rows}-spread{spread}", "rows": rows, "n": 40, "k": 200, "dtype": "bf16",
         "block": block, "bias": True, "x_spread": spread,
         "config": {"block_n": 16, "block_k": 32, "dot": True, "swap": path == "swap", "e4m3_dot": True}}
        for rows in (3, 32)
        for path in ("dot", "swap")
        for scales, block in (("channel", None), ("block", 32))
        for spread in (14, 24)
    ),
    # x's terms made apart (x_apart): fp8_x_terms_kernel first (with the norm where folded), the loop loading its
    # codes and scales; the same sums as the loop's own split, to the bit (same_as)
    *(
        {"id": f"e4m3-{path}-x-apart-{scales}-rows{rows}", "rows": rows, "n": 40, "k": 200, "dtype": "bf16",
         "block": block, "bias": True, "x_spread": 24, "config": {**config, "x_apart": True}, "same_as": config}
        for rows in (3, 32)
        for path, config in (
            ("dot", {"block_n": 16, "block_k": 32, "dot": True, "e4m3_dot": True}),
            ("swap", {"block_n": 16, "block_k": 32, "dot": True, "swap": True, "e4m3_dot": True}),
        )
        for scales, block in (("channel", None), ("block", 32))
    ),
    *(
        {"id": f"{fold}-e4m3-x-apart-{scales}-rows{rows}", "rows": rows, "n": 40 if fold == "norm" else 64,
         "k": 200, "dtype": "bf16", "block": block, "bias": fold == "norm", "fold": fold,
         "config": {**config, "x_apart": True}, "same_as": config}
        for fold in ("norm", "gate_up")
        for config in ({"block_n": 16, "block_k": 32, "dot": True, "swap": True, "split_k": 3, "e4m3_dot": True},)
        for rows in (4, 32)
        for scales, block in (("channel", None), ("block", 32))
    ),
    *(
        {"id": f"split-{scales}", "rows": 3, "n": 40, "k": 200, "dtype": "bf16", "block": block, "bias": True,
         "config": {"block_n": 16, "block_k": 32, "split_k": 3}}
        for scales, block in (("channel", None), ("block", 32))
    ),
    *(
        {"id": f"lookahead-{scales}", "rows": 1, "n": 40, "k": 200, "dtype": "bf16", "block": block, "bias": True,
         "config": {"block_n": 16, "block_k": 32, "lookahead": True}}
        for scales, block in (("channel", None), ("block", 32))
    ),
    # the one-row K walk pipelined through shared memory, the weights as 32-bit words (K whole tiles: 256), also
    # in K slices; where K is no whole number of tiles (200) the plain walk runs
    *(
        {"id": f"staged-{scales}-k{k}-split{split}", "rows": 1, "n": 40, "k": k, "dtype": "bf16", "block": block,
         "bias": True, "config": {"block_n": 16, "block_k": 32, "num_stages": 3, "staged": True, "split_k": split}}
        for k in (256, 200)
        for split in (1, 2)
        for scales, block in (("channel", None), ("block", 32))
    ),
    # the narrow GEMV tiles of the one-row tune grid: 1 or 4 outputs a program, K tiles spanning several scale
    # blocks, the last one ragged
    *(
        {"id": f"narrow-n{block_n}-{scales}-rows{rows}", "rows": rows, "n": 40, "k": 200, "dtype": "bf16",
         "block": block, "bias": True, "config": {"block_n": block_n, "block_k": block_k}}
        for block_n, block_k in ((1, 128), (4, 64))
        for rows in (1, 2)
        for scales, block in (("channel", None), ("block", 32))
    ),
    # the folds (fp8_fold): the norm as x is loaded, the residual or silu(gate) * up in the epilogue, split-K's
    # finish included; gate/up: 32 columns of each half (a whole 32-row block), no bias
    *(
        {"id": f"{fold}-{path}-{dtype}-{scales}-rows{rows}", "rows": rows, "n": 40 if fold != "gate_up" else 64,
         "k": 200, "dtype": dtype, "block": block, "bias": fold != "gate_up", "fold": fold, "config": config}
        for fold in ("norm", "residual", "gate_up")
        for path, dtype, config in (
            ("fma", "bf16", FMA),
            ("split", "bf16", {"block_n": 16, "block_k": 32, "split_k": 3}),
            ("lookahead", "bf16", {"block_n": 16, "block_k": 32, "lookahead": True}),
            ("staged", "bf16", {"block_n": 16, "block_k": 8, "num_stages": 4, "staged": True}),
            ("narrow", "bf16", {"block_n": 4, "block_k": 64}),
            ("dot", "fp16", {"block_n": 16, "block_k": 32, "dot": True}),
            ("swap-split", "fp16", {"block_n": 16, "block_k": 32, "dot": True, "swap": True, "split_k": 3}),
            ("e4m3-swap-split", "bf16", {"block_n": 16, "block_k": 32, "dot": True, "swap": True, "split_k": 3,
                                         "e4m3_dot": True}),
            ("dot", "fp32", {"block_n": 16, "block_k": 32, "dot": True}),
        )
        for rows in ((1, 2) if path in ("fma", "split", "narrow") else (1,) if path in ("lookahead", "staged") else (4, 16, 32))
        for scales, block in (("channel", None), ("block", 32))
    ),
    # gate/up's halves in one walk of K (pair), one x tile for both: plain, swapped with split-K's finish (fp16:
    # the interpreter runs no bf16 tensor-core operand, test_gpu_kernel_paths_agree_with_the_reference runs it)
    *(
        {"id": f"gate_up-{path}-pair-{scales}-rows{rows}", "rows": rows, "n": 64, "k": 200, "dtype": dtype,
         "block": block, "bias": False, "fold": "gate_up", "config": {**config, "pair": True}}
        for path, dtype, config in (
            ("dot", "fp16", {"block_n": 16, "block_k": 32, "dot": True}),
            ("swap-split", "fp16", {"block_n": 16, "block_k": 32, "dot": True, "swap": True, "split_k": 3}),
        )
        for rows in (4, 32)
        for scales, block in (("channel", None), ("block", 32))
    ),
    # the norm as its own kernel first (norm_apart), then the product of the normalised rows
    *(
        {"id": f"{fold}-{path}-apart-{scales}-rows{rows}", "rows": rows, "n": 64, "k": 200, "dtype": dtype,
         "block": block, "bias": False, "fold": fold, "config": {**config, "norm_apart": True}}
        for fold in ("norm", "gate_up")
        for path, dtype, config, rows in (
            ("fma", "bf16", FMA, 2),
            ("swap-pair", "fp16", {"block_n": 16, "block_k": 32, "dot": True, "swap": True, "pair": True}, 32),
        )
        for scales, block in (("channel", None), ("block", 32))
    ),
    *(
        {"id": f"op-{fold}-rows{rows}", "rows": rows, "n": 64, "k": 80, "dtype": dtype, "block": 16, "fold": fold}
        for fold in ("norm", "residual", "gate_up")
        for rows, dtype in ((1, "bf16"), (2, "bf16"), (4, "fp16"))
    ),
    # a bias and a norm weight that are views with a stride of 2 (the kernel reads them contiguous)
    *(
        {"id": f"strided-{fold}", "rows": 2, "n": 40, "k": 72, "dtype": "bf16", "block": None, "bias": True,
         "fold": fold, "strided": True, "config": FMA}
        for fold in ("norm", "residual")
    ),
    {"id": "fp16-block128", "rows": 2, "n": 136, "k": 200, "dtype": "fp16", "block": 128, "config": FMA},
    {"id": "op-default-config-rows1", "rows": 1, "n": 48, "k": 80, "dtype": "bf16", "block": None, "bias": True},
    {"id": "op-default-config-rows64", "rows": 64, "n": 48, "k": 80, "dtype": "fp16", "block": 16, "bias": True},
    {"id": "op-default-config-batched", "rows": 6, "n": 40, "k": 64, "dtype": "fp32", "block": 16, "batched": True},
]  # fmt: skip


@pytest.fixture(scope="module")
def interpreted_results(request):
    """The cases this run selected (the fast tier keeps a few, tests/tiers.py), interpreted in one child."""
    wanted = {
        item.callspec.params["case"]["id"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_kernel_matches_the_reference_under_the_interpreter"
    }
    return run_worker({"cases": [case for case in CASES if case["id"] in wanted]}, interpreted=True)


@needs_triton
@pytest.mark.xdist_group("fp8-interpreter")  # one worker: the child that interprets every case runs once
@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_kernel_matches_the_reference_under_the_interpreter(case, interpreted_results):
    """Equal but for float32 summation order (a rounding flips now and then: within 2 units in the last place);
    a case `same_as` another config gives that config's output bit for bit."""
    result = interpreted_results[case["id"]]
    assert result.get("identical", True), f"{case['id']} differs from {case['same_as']}"
    rows, n = case["rows"], case["n"] // (2 if case.get("fold") == "gate_up" else 1)
    assert result["shape"] == ([2, rows // 2, n] if case.get("batched") else [rows, n])
    assert result["dtype"] == {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[case["dtype"]]
    assert result["error_ulps"] <= 2, result


def _split_rows() -> torch.Tensor:
    """16 rows of 128 bf16 values: each row's values spread over 2^-12..2^0 of its largest, signs mixed, the
    largest's significand from 1.0 up to 1.9921875 (bf16's last below 2: where a scale one binade too small
    would take hi past e4m3's 448), rows from 2^-30 to 2^40; and a row of zeros."""
    gen = torch.Generator().manual_seed(5)
    significands = 1 + torch.randint(0, 128, (16, 128), generator=gen) / 128
    exponents = -torch.randint(0, 13, (16, 128), generator=gen)
    signs = torch.where(torch.rand(16, 128, generator=gen) < 0.5, -1.0, 1.0)
    x = signs * significands * 2.0**exponents
    x[:, 0] = (1 + torch.arange(16) / 16 + 127 / 128 * (torch.arange(16) == 15)).clamp(max=1.9921875)
    x = x * 2.0 ** torch.linspace(-30, 40, 16).round()[:, None]
    x[3] = 0.0
    return x.to(torch.bfloat16)


@needs_triton
def test_x_splits_into_two_e4m3_terms_exactly_and_inside_e4m3s_range():
    """_x_as_e4m3_pair: every code finite (no NaN code 0x7F/0xFF), each row's largest hi in [128, 256) (under
    448, and no binade lost), and hi + lo / 16 times the row's scale gives x's value back exactly."""
    x = _split_rows()
    got = run_worker({"split": {"x": x.float().tolist()}}, interpreted=True)
    hi = torch.tensor(got["hi"], dtype=torch.uint8)
    lo = torch.tensor(got["lo"], dtype=torch.uint8)
    scale = torch.tensor(got["scale"], dtype=torch.float64)
    assert not ((hi & 0x7F) == 0x7F).any() and not ((lo & 0x7F) == 0x7F).any()
    hi_v, lo_v = (codes.view(torch.float8_e4m3fn).double() for codes in (hi, lo))
    live = x.float().abs().amax(dim=1) > 0
    assert ((hi_v.abs().amax(dim=1) >= 128) == live).all() and (hi_v.abs() < 256).all()
    assert torch.equal((hi_v + lo_v / 16) * scale[:, None], x.double())
    assert (scale[live] == 2.0 ** torch.floor(torch.log2(x.float().abs().amax(dim=1)[live].double())) / 128).all()


# ---------------------------------------------------------------- the PTX for the H200

PTX_VARIANTS = [
    {"id": "one-row", "num_stages": 2, "flags": {"BLOCK_M": 1, "BLOCK_N": 32, "BLOCK_K": 256, "LOOKAHEAD": True}},
    # the K walk pipelined through shared memory (SkinnyConfig.staged): 16-byte copies, not register loads
    {"id": "one-row-staged", "num_stages": 3, "flags": {"BLOCK_M": 1, "BLOCK_N": 64, "BLOCK_K": 256, "ROW_STAGES": 3}},
    {"id": "one-row-block", "num_stages": 2, "flags": {"BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 256, "BLOCKWISE": True}},
    {"id": "tensor-cores", "num_stages": 4, "flags": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True}},
    # the folds (fp8_fold): the norm as x is loaded, the residual in the epilogue; K 4096's row norms
    {"id": "one-row-folded", "num_stages": 2, "flags": {
        "BLOCK_M": 1, "BLOCK_N": 32, "BLOCK_K": 256, "LOOKAHEAD": True, "NORM": 1, "HAS_RES": True,
        "RSTD_CHUNK": 4096, "RSTD_CHUNKS": 1}},
    {"id": "one-row-gate-up", "num_stages": 2, "flags": {
        "BLOCK_M": 1, "BLOCK_N": 32, "BLOCK_K": 256, "LOOKAHEAD": True, "NORM": 1, "GATE_UP": True,
        "RSTD_CHUNK": 4096, "RSTD_CHUNKS": 1}},
    # default_config's narrow tiles at one row: 1-4 weight rows of 2 KB a program
    {"id": "narrow", "num_stages": 2, "flags": {"BLOCK_M": 1, "BLOCK_N": 2, "BLOCK_K": 2048}},
    {"id": "narrow-block", "num_stages": 2, "flags": {"BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 2048, "BLOCKWISE": True}},
    {"id": "narrow-gate-up", "num_stages": 2, "flags": {
        "BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 2048, "NORM": 1, "GATE_UP": True, "RSTD_CHUNK": 4096, "RSTD_CHUNKS": 1}},
    {"id": "narrow-one-output-folded", "num_stages": 2, "flags": {
        "BLOCK_M": 1, "BLOCK_N": 1, "BLOCK_K": 2048, "NORM": 1, "HAS_RES": True, "RSTD_CHUNK": 4096, "RSTD_CHUNKS": 1}},
    # e4m3 tensor cores: x split into two e4m3 terms, the weights' codes multiplied as copied
    {"id": "e4m3-tensor-cores", "num_stages": 4, "flags": {
        "BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "USE_DOT": True, "SWAP": True, "E4M3_DOT": True}},
    # x's terms made apart (x_apart): the loop copies their codes as it copies the weights', no split in it
    {"id": "e4m3-x-apart", "num_stages": 4, "flags": {
        "BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "USE_DOT": True, "SWAP": True, "E4M3_DOT": True,
        "X_APART": True}},
    {"id": "tensor-cores-folded", "num_stages": 4, "flags": {
        "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True, "NORM": 1, "HAS_RES": True,
        "RSTD_CHUNK": 256, "RSTD_CHUNKS": 16}},
]  # fmt: skip
for _variant in PTX_VARIANTS:  # the rest as the launch passes it for bf16 x, one slice, PDL on
    _variant["flags"] = {
        "HAS_B": True, "BLOCKWISE": False, "SPLIT": 1, "USE_DOT": False, "IEEE_DOT": False, "SWAP": False,
        "EVEN_K": True, "OUT_BF16": True, "USE_PDL": True, "LOOKAHEAD": False, "NORM": 0, "HAS_RES": False,
        "GATE_UP": False, "E4M3_DOT": False, "PAIR_DOT": False,
        "RSTD_CHUNK": 1, "RSTD_CHUNKS": 0, "ROW_STAGES": 1, "X_APART": False, **_variant["flags"],
    }  # fmt: skip


@needs_triton
def test_weight_loads_are_16_byte_vectors_on_sm90():
    """One byte a weight is only half bf16's traffic if the loads stay wide: a GEMV program's tile arrives in
    16-byte register loads, the staged GEMV's and the tensor-core path's pipelined copies to shared memory are
    16 bytes each (Triton pipelines a loop without tl.dot only when the loop asks: a failure here says it no
    longer does)."""
    found = run_worker({"ptx": PTX_VARIANTS}, interpreted=False)
    one_row = ("one-row", "one-row-block", "one-row-folded", "one-row-gate-up")
    for variant in (*one_row, "narrow", "narrow-block", "narrow-gate-up", "narrow-one-output-folded"):
        assert found[variant]["v4_loads"] >= found[variant]["expected_vectors"] > 0, found[variant]
    staged = found["one-row-staged"]  # the weights in 16-byte copies (x's row in 4-byte ones), none in registers
    assert max(staged["copy_bytes"]) == 16 and staged["v4_loads"] == 0, staged
    for variant in ("tensor-cores", "tensor-cores-folded", "e4m3-tensor-cores", "e4m3-x-apart"):
        assert found[variant]["copy_bytes"] == [16], found[variant]
    assert found["tensor-cores"]["e4m3_mmas"] == 0, found["tensor-cores"]


@needs_triton
def test_e4m3_tensor_cores_multiply_the_codes_as_copied_on_sm90():
    """e4m3_dot: warpgroup MMAs of e4m3 by e4m3, not one conversion from e4m3 (the weights go from the copy in
    shared memory to the tensor cores untouched); with x's terms made apart, x's codes too."""
    found = run_worker({"ptx": [v for v in PTX_VARIANTS if v["id"].startswith("e4m3-")]}, interpreted=False)
    for variant in ("e4m3-tensor-cores", "e4m3-x-apart"):
        assert found[variant]["e4m3_mmas"] > 0, found
        assert found[variant]["e4m3_conversions"] == 0, found


@needs_triton
def test_the_kernel_reads_every_e4m3_code_as_torch_converts_it():
    """The tensor cores' operand is built by integer ops, not conversion instructions: each of the 254 finite
    codes (subnormals, both zeros, 448) gives the bits of torch's value."""
    assert run_worker({"codes": True}, interpreted=True) == {"bits": []}


# ---------------------------------------------------------------- GPU


def _gpu_operands(m, n, k, block, bias=True, seed=0):
    return make(m, n, k, block=block, device="cuda", bias=bias, seed=seed)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("rows", [1, 2, 4, 16, 32, fm.SKINNY_MAX_ROWS])
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_kernel_matches_the_reference(rows, block):
    """Llama-8B-like shapes through the op (the skinny kernel at every decode batch: activations as they are),
    one odd N/K shape too."""
    for n, k in [(4096, 4096), (1024, 4096), (4096, 14336), (200, 328)]:
        x, weight, scale, block_, bias = _gpu_operands(rows, n, k, block)
        got = fm.fp8_matmul(x, weight, scale, block_, bias)
        assert error_ulps(got, reference_fp8_matmul(x, weight, scale, block_, bias)) <= 2, (n, k)


@pytest.mark.cuda
@needs_cuda
def test_gpu_kernel_reads_every_e4m3_code_as_torch_converts_it():
    """Compiled: the bits, and the bf16 operand the tensor cores take (its PTX, which no interpreter runs)."""
    from fp8_codes import mismatches

    assert mismatches("cuda", bf16=True) == {"bits": [], "bfloat16": []}


def _fold_operands(x, n, seed=1):
    gen = torch.Generator(device=x.device).manual_seed(seed)
    norm_weight = (torch.rand(x.shape[-1], device=x.device, generator=gen) + 0.5).to(x.dtype)
    return norm_weight, torch.randn(x.shape[0], n, device=x.device, generator=gen).to(x.dtype)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("rows", [1, 2, 4, 16, 32, fm.SKINNY_MAX_ROWS, fm.SKINNY_MAX_ROWS + 7])
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_folded_ops_match_the_unfolded_sequence(rows, block):
    """The norm, the residual and gate/up's activation folded into the skinny kernel (fp8_fold) at its rows:
    the reference's numbers within 2 units in the last place; above its rows the norm kernel, then the weight
    dequantized to bf16 (its rounding, 2**-9 of each weight, bounds the error). 256 rows: two 128-row blocks,
    gate's and up's."""
    for n, k in [(4096, 4096), (1024, 4096), (256, 328)]:
        x, weight, scale, block_, bias = _gpu_operands(rows, n, k, block)
        norm_weight, residual = _fold_operands(x, n)
        normed = reference_rms_norm(x, norm_weight, 1e-5, "llama")
        got_normed = fm.fp8_norm_matmul(x, norm_weight, 1e-5, weight, scale, block_, bias)
        got_added = fm.fp8_matmul_residual(x, weight, scale, block_, bias, residual)
        got_gated = fm.fp8_norm_gate_up(x, norm_weight, 1e-5, weight, scale, block_)  # n/2 columns of each
        normed_ref = reference_fp8_matmul(normed, weight, scale, block_, bias)
        added_ref = residual + reference_fp8_matmul(x, weight, scale, block_, bias)
        gate, up = reference_fp8_sums(normed, weight, scale, block_, None).chunk(2, dim=-1)
        gated_ref = F.silu(gate.to(x.dtype)) * up.to(x.dtype)
        if rows <= fm.SKINNY_MAX_ROWS:
            assert error_ulps(got_normed, normed_ref) <= 2 and error_ulps(got_added, added_ref) <= 2, (n, k)
            assert gated_error_ulps(got_gated, gate, up) <= 2, (n, k)
        else:
            pairs = [(got_normed, normed_ref), (got_added - residual, added_ref - residual), (got_gated, gated_ref)]
            for got, ref in pairs:
                assert (got.float() - ref.float()).norm() / ref.float().norm() < 2**-7, (n, k)


# Tilings the default configs never pick but the tune grids (tune/grids.py) try: rows, config.
GPU_CONFIGS = {
    "lookahead": (1, configs.SkinnyConfig(32, 256, 4, 1, lookahead=True)),
    "lookahead-split": (1, configs.SkinnyConfig(16, 256, 4, 1, split_k=4, lookahead=True)),
    "staged": (1, configs.SkinnyConfig(64, 256, 8, 3, staged=True)),
    "staged-split": (1, configs.SkinnyConfig(32, 256, 4, 4, split_k=2, staged=True)),
    "staged-narrow": (1, configs.SkinnyConfig(2, 2048, 4, 3, staged=True)),
    "narrow": (1, configs.SkinnyConfig(4, 2048, 4, 2)),
    "narrow-one-output": (1, configs.SkinnyConfig(1, 4096, 4, 2)),
    "dot-8-warps": (8, configs.SkinnyConfig(128, 128, 8, 4, dot=True)),
    "dot-split-3-rows": (3, configs.SkinnyConfig(32, 128, 4, 4, split_k=2, dot=True)),
    "swap": (8, configs.SkinnyConfig(64, 128, 4, 4, dot=True, swap=True)),
    "swap-split": (16, configs.SkinnyConfig(64, 128, 4, 4, split_k=4, dot=True, swap=True)),
    "e4m3-one-row": (1, configs.SkinnyConfig(128, 128, 4, 4, dot=True, swap=True, e4m3_dot=True)),
    "e4m3": (16, configs.SkinnyConfig(128, 128, 4, 4, dot=True, swap=True, e4m3_dot=True)),
    "e4m3-wide": (32, configs.SkinnyConfig(256, 128, 8, 3, dot=True, swap=True, e4m3_dot=True)),
    "e4m3-split": (32, configs.SkinnyConfig(64, 128, 4, 4, split_k=4, dot=True, swap=True, e4m3_dot=True)),
    "pair": (32, configs.SkinnyConfig(128, 128, 8, 4, dot=True, pair=True)),
    "pair-swap-split": (16, configs.SkinnyConfig(64, 128, 2, 4, split_k=2, dot=True, swap=True, pair=True)),
    "apart": (32, configs.SkinnyConfig(64, 128, 2, 4, dot=True, swap=True, norm_apart=True)),
    "e4m3-apart": (32, configs.SkinnyConfig(128, 128, 8, 4, dot=True, swap=True, e4m3_dot=True, norm_apart=True)),
    "e4m3-x-apart": (32, configs.SkinnyConfig(128, 128, 8, 4, dot=True, swap=True, e4m3_dot=True, x_apart=True)),
    "e4m3-x-apart-split": (
        8,
        configs.SkinnyConfig(64, 128, 4, 3, split_k=2, dot=True, swap=True, e4m3_dot=True, x_apart=True),
    ),
}


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", list(GPU_CONFIGS))
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_tune_grid_tilings_match_the_reference(name, block):
    """bf16 on tensor cores (the interpreter cannot run it), swapped, split-K, the one-row lookahead, the K walk
    staged through shared memory, x's e4m3 terms made apart, each plain and folded: the reference's numbers
    within 2 units in the last place. (264, 4160): a ragged last
    tile of N, K neither a multiple of the K tile nor of the scale block."""
    rows, cfg = GPU_CONFIGS[name]
    for n, k in [(1024, 4096), (264, 4160)]:
        x, weight, scale, block_, bias = _gpu_operands(rows, n, k, block)
        norm_weight, residual = _fold_operands(x, n)
        normed = reference_rms_norm(x, norm_weight, 1e-5, "llama")
        want = reference_fp8_matmul(x, weight, scale, block_, bias)
        assert error_ulps(fp8_skinny.launch(x, weight, scale, block_, bias, cfg), want) <= 2, (n, k)
        got = fp8_skinny.launch(x, weight, scale, block_, bias, cfg, norm_weight=norm_weight, eps=1e-5)
        assert error_ulps(got, reference_fp8_matmul(normed, weight, scale, block_, bias)) <= 2, (n, k)
        got = fp8_skinny.launch(x, weight, scale, block_, bias, cfg, residual=residual)
        assert error_ulps(got, residual + want) <= 2, (n, k)
        if block is None or (n // 2) % block == 0:
            got = fp8_skinny.launch(
                x, weight, scale, block_, None, cfg, norm_weight=norm_weight, eps=1e-5, gate_up=True
            )
            gate, up = reference_fp8_sums(normed, weight, scale, block_, None).chunk(2, dim=-1)
            assert gated_error_ulps(got, gate, up) <= 2, (n, k)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_e4m3_tensor_cores_keep_x_whole_and_pass_nan_on(block):
    """e4m3_dot splits x into two e4m3 terms: rows whose values span 2^-13 of their largest, one column 2^-33,
    give the reference's numbers within 2 units in the last place; made apart (x_apart), the loop's own bits
    where no norm is folded. A NaN or an Inf in a row makes that row's outputs non-finite and leaves the other
    rows' bits as they were, on these paths and the default one, with the norm or the residual folded in."""
    cfg = configs.SkinnyConfig(128, 128, 4, 4, dot=True, swap=True, e4m3_dot=True)
    apart = dataclasses.replace(cfg, x_apart=True)
    x, weight, scale, block_, bias = _gpu_operands(32, 1024, 4096, block)
    x = (x.float() * 2.0 ** -(torch.arange(4096, device="cuda") % 14).float()).to(x.dtype)
    x[:, 7] *= 2.0**-20
    got = fp8_skinny.launch(x, weight, scale, block_, bias, cfg)
    assert error_ulps(got, reference_fp8_matmul(x, weight, scale, block_, bias)) <= 2
    norm_weight, residual = _fold_operands(x, 1024)
    folded = [{}, {"norm_weight": norm_weight, "eps": 1e-5}, {"residual": residual}]
    ways = (cfg, apart, None)
    clean = [fp8_skinny.launch(x, weight, scale, block_, bias, c, **fold) for c in ways for fold in folded]
    assert torch.equal(clean[3], clean[0]) and torch.equal(clean[5], clean[2])  # x apart: the same bits
    x[3, 100], x[5, 2000] = float("nan"), float("inf")
    others = [row for row in range(32) if row not in (3, 5)]
    # e4m3 and the default tiles, plain and with the norm or the residual folded in (their roundings keep NaN)
    poisoned = [fp8_skinny.launch(x, weight, scale, block_, bias, c, **fold) for c in ways for fold in folded]
    for got, was in zip(poisoned, clean):
        assert not got[3].isfinite().any() and not got[5].isfinite().any()
        assert torch.equal(got[others], was[others])


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("rows", [1, 4, 32, fm.SKINNY_MAX_ROWS + 7])
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_fp16_x_matches_the_reference(rows, block):
    """fp16 activations: the skinny kernel's fp8 -> fp16 conversion and rounding; above its rows the weight
    dequantized to fp16, then cuBLAS."""
    x, weight, scale, block_, bias = make(rows, 1024, 4096, block=block, dtype=torch.float16, device="cuda", bias=True)
    got = fm.fp8_matmul(x, weight, scale, block_, bias)
    ref = reference_fp8_matmul(x, weight, scale, block_, bias)
    assert got.dtype == torch.float16
    if rows <= fm.SKINNY_MAX_ROWS:
        assert error_ulps(got, ref) <= 2
    else:
        assert torch.equal(got, F.linear(x, dequantize(weight, scale, block_).to(x.dtype), bias))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("rows", [1, 8])
def test_gpu_capture_replays_the_folded_ops(rows):
    """Captured with PDL where the GPU has it: the folded kernels (the norm, the residual, gate/up) read x, the
    norm's weights and the residual at replay, as eager does."""
    x, weight, scale, block, bias = _gpu_operands(rows, 1024, 4096, 128)
    norm_weight, residual = _fold_operands(x, 1024)
    static_x = x.clone()

    def folded():
        return (
            fm.fp8_norm_matmul(static_x, norm_weight, 1e-5, weight, scale, block, bias),
            fm.fp8_matmul_residual(static_x, weight, scale, block, bias, residual),
            fm.fp8_norm_gate_up(static_x, norm_weight, 1e-5, weight, scale, block),
        )

    eager = folded()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        folded()  # warm up (Triton compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = folded()
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    for out, expected in zip(outs, folded()):
        assert torch.equal(out, expected)
    static_x.copy_(x)
    graph.replay()
    for out, expected in zip(outs, eager):
        assert torch.equal(out, expected)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("block", [None, 128])
def test_gpu_prefill_rows_dequantize_the_weight_for_cublas(block):
    """Above the decode batches the weight is dequantized to x's dtype: a prefill's activations stay bf16 too."""
    x, weight, scale, block_, bias = _gpu_operands(fm.SKINNY_MAX_ROWS + 1, 256, 640, block)  # ragged K blocks
    got = fm.fp8_matmul(x, weight, scale, block_, bias)
    expected = F.linear(x, dequantize(weight, scale, block_).to(x.dtype), bias)
    assert torch.equal(got, expected)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("rows", [1, 8, fm.SKINNY_MAX_ROWS, fm.SKINNY_MAX_ROWS + 1])  # the kernel's tilings, cuBLAS
def test_gpu_capture_replays_what_eager_computes(rows):
    x, weight, scale, block, bias = _gpu_operands(rows, 1024, 4096, 128)
    static_x = x.clone()
    eager = fm.fp8_matmul(x, weight, scale, block, bias)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fm.fp8_matmul(static_x, weight, scale, block, bias)  # warm up (Triton compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fm.fp8_matmul(static_x, weight, scale, block, bias)
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(out, fm.fp8_matmul(static_x, weight, scale, block, bias))
    static_x.copy_(x)
    graph.replay()
    assert torch.equal(out, eager)


@pytest.mark.cuda
@needs_cuda
def test_gpu_inductor_compiles_around_the_op_without_a_graph_break():
    x, weight, scale, block, bias = _gpu_operands(4, 1024, 4096, None)
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)  # fullgraph: a graph break raises
    def step(x):
        return F.silu(fm.fp8_matmul(x, weight, scale, block, bias)) * 2

    got = step(x)
    expected = F.silu(fm.fp8_matmul(x, weight, scale, block, bias)) * 2
    assert error_ulps(got, expected) <= 2
