"""Skinny matmuls (fused/kernels): the references against HF's modules, the Triton kernels against the
references (CPU: Triton interpreter, conftest.py; GPU: bf16, torch.compile and CUDA graphs)."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cuda_graphs import captured

from accelerate_graph import settings
from accelerate_graph.fused import layer_program
from accelerate_graph.fused.kernels import configs, pdl
from accelerate_graph.fused.kernels import skinny_matmul as sm
from accelerate_graph.fused.kernels.configs import SkinnyConfig


def _interpreter_in_process() -> bool:
    """Triton's functions and ours decorated under the interpreter (conftest.py)."""
    if sm.skinny_kernels is None or not sm.skinny_kernels.INTERPRETED:
        return False
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.sum, InterpretedFunction)


INTERPRETER = _interpreter_in_process()
FRESH_PROCESS = sm.skinny_kernels is not None and not INTERPRETER and not torch.cuda.is_available()
interpreted = pytest.mark.skipif(
    not INTERPRETER,
    reason="needs triton imported under TRITON_INTERPRET=1 (else test_interpreter_tests_in_a_fresh_process runs these)",
)
K, NS = 72, (40, 24, 24)  # K not a multiple of any BLOCK_K, N not a multiple of any BLOCK_N
# The interpreter computes garbage in bf16 and for tl.dot on bf16: the multiply-and-sum path runs in bf16,
# tl.dot in float32 (the GPU tests run tl.dot in bf16). "swap": tl.dot of W @ x^T, the weights on the
# MMA's long side.
PATHS = {
    "fma-bf16": (torch.bfloat16, {}),
    "dot-fp32": (torch.float32, {"dot": True}),
    "swap-fp32": (torch.float32, {"dot": True, "swap": True}),
}


def assert_rounding_close(got, ref, ulps: int = 2):
    """Equal but for summation order: a float32 sum in another order flips a rounding now and then,
    and a flipped gate moves the product by a unit or two in the last place."""
    assert got.dtype == ref.dtype and got.shape == ref.shape
    eps = torch.finfo(ref.dtype).eps if ref.dtype != torch.float32 else 2e-6
    scale = ref.float().abs().mean().item()
    torch.testing.assert_close(got.float(), ref.float(), rtol=ulps * eps, atol=ulps * eps * scale)


# float32 bit patterns whose bf16 rounding is easy to get wrong: NaNs (0x7FFFFFFF is the GPU's own, whose
# rounding carry reaches the sign by bit arithmetic), infinities, the largest float (rounds to inf), ties to
# even at 1.0 and among subnormals, signed zero
ROUNDING_BITS = [
    0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x7F800001, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x3F808000,
    0x3F818000, 0x00008000, 0x00018000, 0x80000000, 0x40490FDB, 0xC2F6E979, 0x0000FFFF, 0x3F7FFFFF,
]  # fmt: skip

if sm.skinny_kernels is not None:
    import triton
    import triton.language as tl

    from accelerate_graph.fused.kernels.skinny_kernels import _round

    @triton.jit
    def _round_kernel(src, dst, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(dst + offs, _round(tl.load(src + offs), True, tl.bfloat16))


def assert_rounds_like_torch(device: str):
    """The kernels' rounding to bf16 gives torch's bits for ROUNDING_BITS, NaN kept NaN."""
    bits = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in ROUNDING_BITS], dtype=torch.int32)
    values = bits.view(torch.float32).to(device)
    got = torch.empty_like(values)
    _round_kernel[(1,)](values, got, len(ROUNDING_BITS))
    want = values.cpu().to(torch.bfloat16).float()
    got = got.cpu()
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    finite = ~want.isnan()
    assert torch.equal(got[finite].view(torch.int32), want[finite].view(torch.int32)), (got, want)


@interpreted
def test_the_interpreters_rounding_to_bf16_is_the_gpus_nan_included():
    assert_rounds_like_torch("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_rounding_to_bf16_is_torchs_nan_included():
    assert_rounds_like_torch("cuda")


def make(m, dtype, device="cpu", k=K, ns=NS, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape, s=1.0: (torch.randn(*shape, generator=gen) * s).to(device, dtype)  # noqa: E731
    x = rand(m, k, s=3.0)
    return x, rand(k, s=0.5) + 1, [rand(n, k, s=k**-0.5) for n in ns], [rand(n) for n in ns]


@pytest.fixture
def force(monkeypatch):
    """force(cfg): every launch of the test uses cfg instead of the table or the heuristic."""
    return lambda cfg: monkeypatch.setattr(configs, "config_for", lambda *args, **kwargs: cfg)


# ---------------------------------------------------------------- the references are HF's rounding


def test_reference_norm_is_hf_rms_norm_exactly():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, w, _, _ = make(5, torch.bfloat16)
    llama, gemma = LlamaRMSNorm(K, eps=1e-5).to(torch.bfloat16), GemmaRMSNorm(K, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        llama.weight.copy_(w)
        gemma.weight.copy_(w - 1)
    assert torch.equal(sm.reference_rms_norm(x, llama.weight, 1e-5, "llama"), llama(x))
    assert torch.equal(sm.reference_rms_norm(x, gemma.weight, 1e-6, "gemma"), gemma(x))


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_reference_mlp_and_residual_are_eager_up_to_summation_order(activation):
    x, _, (wg, wu, _), _ = make(4, torch.bfloat16, ns=(40, 40, 8))
    act = F.silu if activation == "silu" else lambda t: F.gelu(t, approximate="tanh")
    eager = act(F.linear(x, wg)) * F.linear(x, wu)
    assert_rounding_close(sm.reference_norm_gate_up(x, None, 0.0, "llama", wg, wu, activation), eager)
    residual = torch.randn(4, 40).to(torch.bfloat16)
    assert_rounding_close(sm.reference_linear_residual(x, wg, None, residual), residual + F.linear(x, wg))


# ---------------------------------------------------------------- kernels under the interpreter


@interpreted
@pytest.mark.parametrize("m", [1, 3, 8, 17, 32])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bias_and_norm", [(True, True), (False, False), (True, False)])
def test_norm_projections(m, path, bias_and_norm, force):
    dtype, kind = PATHS[path]
    with_bias, with_norm = bias_and_norm
    force(SkinnyConfig(16, 32, **kind))
    x, nw, ws, bs = make(m, dtype, seed=m)
    biases = [bs[0], None, bs[2]] if with_bias else None
    nw = nw if with_norm else None
    got = sm.norm_projections(x, nw, 1e-6, "llama", ws, biases)
    want = sm.reference_norm_projections(x, nw, 1e-6, "llama", ws, biases)
    assert len(got) == 3
    for g, r in zip(got, want):
        assert_rounding_close(g, r)


@interpreted
@pytest.mark.parametrize("m", [1, 32])
def test_the_row_norm_in_unrolled_loads(m, force):
    """Each program's rstd reads x's rows in rstd_chunks' loads: one up to 4,096 values a program, several
    above (32 rows of 300: three loads of 128 columns, the last masked)."""
    k = 300
    assert sm.rstd_chunks(k, 32) == (128, 3) and sm.rstd_chunks(k, 1) == (512, 1)
    force(SkinnyConfig(16, 64))
    x, nw, ws, bs = make(m, torch.bfloat16, k=k, ns=(40, 40, 24), seed=3)
    got = sm.norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu")
    assert_rounding_close(got, sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"))


@interpreted
@pytest.mark.parametrize("k", [K, 5000])  # 5,000: two blocks of 4,096, the second masked
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "float32"])
def test_rms_norm_kernel_rounds_like_the_reference(k, dtype):
    """The step's final norm in one launch: HF's RMSNorm up to the float32 sum's order (which can move
    rstd by an ulp and, rarely, a rounding), rows in any leading shape."""
    x, nw, _, _ = make(6, dtype, k=k, ns=(8,))
    x = x.reshape(2, 3, k)
    got = sm.rms_norm(x, nw, 1e-5)
    assert got.shape == x.shape
    assert_rounding_close(got, sm.reference_rms_norm(x, nw, 1e-5, "llama"))


@interpreted
def test_rms_norm_kernel_is_recorded_by_the_cpu_emulation_of_graphs():
    """A kernel launched beside the dispatcher would be invisible to the emulation (it records aten and
    registered ops): its output would replay as the fresh garbage of torch.empty."""
    from accelerate_graph.core.backends.emulated import EmulatedBackend

    x, nw, _, _ = make(3, torch.float32, ns=(8,))
    graph = EmulatedBackend().capture(lambda: sm.rms_norm(x, nw, 1e-5))
    x.copy_(make(3, torch.float32, ns=(8,), seed=1)[0])
    assert_rounding_close(graph.replay(), sm.reference_rms_norm(x, nw, 1e-5, "llama"))


@interpreted
@pytest.mark.parametrize("n_weights", [1, 2])
def test_norm_projections_with_fewer_weights_and_batched_rows(n_weights, force):
    force(SkinnyConfig(16, 32))
    x, nw, ws, bs = make(6, torch.bfloat16)
    x = x.reshape(2, 3, K)  # [batch, seq, hidden]: rows flattened, outputs shaped alike
    got = sm.norm_projections(x, nw, 1e-6, "llama", ws[:n_weights], bs[:n_weights])
    want = sm.reference_norm_projections(x, nw, 1e-6, "llama", ws[:n_weights], bs[:n_weights])
    assert [g.shape for g in got] == [(2, 3, n) for n in NS[:n_weights]]
    for g, r in zip(got, want):
        assert_rounding_close(g, r)


@interpreted
@pytest.mark.parametrize("m", [1, 3, 8, 17, 32])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_residual(m, path, with_bias, force):
    dtype, kind = PATHS[path]
    force(SkinnyConfig(16, 32, **kind))
    x, _, ws, bs = make(m, dtype, seed=m)
    residual = make(m, dtype, k=NS[0], seed=m + 100)[0]
    bias = bs[0] if with_bias else None
    got = sm.linear_residual(x, ws[0], bias, residual)
    assert_rounding_close(got, sm.reference_linear_residual(x, ws[0], bias, residual))


@interpreted
@pytest.mark.parametrize("m", [1, 3, 8, 17, 32])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("norm", [None, "llama", "gemma"])
def test_norm_gate_up(m, path, norm, force):
    dtype, kind = PATHS[path]
    force(SkinnyConfig(16, 32, **kind))
    x, nw, ws, _ = make(m, dtype, ns=(40, 40), seed=m)
    nw = None if norm is None else nw
    activation = "gelu_tanh" if norm == "gemma" else "silu"
    got = sm.norm_gate_up(x, nw, 1e-6, norm or "llama", ws[0], ws[1], activation)
    assert_rounding_close(got, sm.reference_norm_gate_up(x, nw, 1e-6, norm or "llama", ws[0], ws[1], activation))


@interpreted
@pytest.mark.parametrize("op", ["proj", "residual", "gate_up"])
@pytest.mark.parametrize("k", [72, 128])  # ragged and even K slices
@pytest.mark.parametrize("path", ["fma-bf16", "swap-fp32"])
def test_split_k_matches_one_pass(op, k, path, force):
    dtype, kind = PATHS[path]
    force(SkinnyConfig(16, 32, split_k=3, **kind))
    x, nw, ws, bs = make(5, dtype, k=k, ns=(40, 40, 24))
    if op == "proj":
        got = sm.norm_projections(x, nw, 1e-6, "gemma", ws, bs)
        want = sm.reference_norm_projections(x, nw, 1e-6, "gemma", ws, bs)
    elif op == "residual":
        residual = make(5, dtype, k=40, seed=9)[0]
        got = (sm.linear_residual(x, ws[0], bs[0], residual),)
        want = (sm.reference_linear_residual(x, ws[0], bs[0], residual),)
    else:
        got = (sm.norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"),)
        want = (sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"),)
    for g, r in zip(got, want):
        assert_rounding_close(g, r)


@interpreted
@pytest.mark.parametrize("path", ["fma-bf16", "swap-fp32"])
@pytest.mark.parametrize("rows", [5, 20], ids=["finish-kernel", "last-slice"])
def test_split_k_finishes_like_the_reference_and_leaves_the_counters_zero(path, rows, force):
    """Split-K's finish: finish_kernel up to FINISH_HERE_ABOVE_ROWS rows, above them the last slice of each
    block to arrive (arrival counters). Each op rounds like the reference, and every launch leaves the
    counters at zero (else the next launch would finish a block too early): run twice."""
    from accelerate_graph.fused.kernels import arrival

    dtype, kind = PATHS[path]
    force(SkinnyConfig(16, 32, split_k=3, **kind))
    x, nw, ws, bs = make(rows, dtype, k=72, ns=(40, 40, 24), seed=3)
    residual = make(rows, dtype, k=40, seed=4)[0]
    want = [
        *sm.reference_norm_projections(x, nw, 1e-6, "llama", ws, bs),
        sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"),
        sm.reference_linear_residual(x, ws[0], bs[0], residual),
    ]
    arrival._counters.pop(torch.device("cpu"), None)
    for _ in range(2):
        got = [
            *sm.norm_projections(x, nw, 1e-6, "llama", ws, bs),
            sm.norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"),
            sm.linear_residual(x, ws[0], bs[0], residual),
        ]
        for g, r in zip(got, want):
            assert_rounding_close(g, r)
        assert all(int(c.count_nonzero()) == 0 for c in arrival._counters.values())
    made = torch.device("cpu") in arrival._counters
    assert made == (rows > sm.FINISH_HERE_ABOVE_ROWS), "the counters serve the launches above the rows only"


def test_split_k_finishes_in_its_last_slice_above_the_rows_unless_traced():
    assert [sm.finishes_in_last_slice(rows) for rows in (8, 16, 17, 32)] == [False, False, True, True]
    assert not sm.finishes_in_last_slice(32, launched_now=False)  # a traced launch keeps finish_kernel


@interpreted
@pytest.mark.parametrize("m", [2, 5])
@pytest.mark.parametrize("split_k", [1, 2])
def test_several_rows_without_tensor_cores_sum_each_row_as_one_row_does(m, split_k, force):
    """skinny_kernels._accumulate_rows: at several rows the products of each row are summed over the K walk
    and reduced once, as _accumulate_one_row does for one: each row of every op is, bit for bit (the
    interpreter's float32 sums, float32 out: the order shows), what that row alone gives (reducing each K
    block as it came would not), and close to the reference."""
    x, nw, ws, bs = make(m, torch.float32, ns=(40, 40, 24), seed=m)
    residual = make(m, torch.float32, k=40, seed=m + 1)[0]

    def every_op(rows):
        return [
            *sm.norm_projections(x[rows], nw, 1e-6, "llama", ws, bs),
            sm.norm_gate_up(x[rows], nw, 1e-6, "llama", ws[0], ws[1], "silu"),
            sm.linear_residual(x[rows], ws[0], bs[0], residual[rows]),
        ]

    force(SkinnyConfig(8, 32, split_k=split_k))
    together = every_op(slice(None))
    for row in range(m):
        for got, alone in zip(together, every_op(slice(row, row + 1))):
            assert torch.equal(got[row : row + 1], alone)
    assert_rounding_close(together[3], sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"))


@interpreted
@pytest.mark.parametrize("k", [72, 64, 32])  # a ragged last block, two blocks, one block (nothing ahead)
@pytest.mark.parametrize("split_k", [1, 2])
def test_one_row_with_the_next_block_loaded_ahead_is_the_same_sum(k, split_k, force):
    """SkinnyConfig.lookahead: the loads of K block k + 1 are issued before block k is multiplied; the sums
    and their order are unchanged, so every op gives what the plain loop gives, bit for bit, and rounds
    like the reference. Above one row (and on tensor cores) the flag changes nothing."""
    x, nw, ws, bs = make(1, torch.bfloat16, k=k, ns=(40, 40, 24), seed=k)
    residual = make(1, torch.bfloat16, k=40, seed=k + 1)[0]

    def every_op():
        return [
            *sm.norm_projections(x, nw, 1e-6, "llama", ws, bs),
            sm.norm_gate_up(x, nw, 1e-6, "gemma", ws[0], ws[1], "gelu_tanh"),
            sm.linear_residual(x, ws[0], bs[0], residual),
        ]

    plain = SkinnyConfig(8, 32, split_k=split_k)
    force(plain)
    want = every_op()
    force(dataclasses.replace(plain, lookahead=True))
    got = every_op()
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert_rounding_close(got[3], sm.reference_norm_gate_up(x, nw, 1e-6, "gemma", ws[0], ws[1], "gelu_tanh"))


@interpreted
@pytest.mark.parametrize("m", [1, 2, 3, 32])
def test_heuristic_configs_run(m):
    """No table entry for these shapes: the heuristic's configs (tl.dot above 2 rows) in float32."""
    x, nw, ws, bs = make(m, torch.float32, seed=m)
    got = sm.norm_projections(x, nw, 1e-6, "llama", ws, bs)
    for g, r in zip(got, sm.reference_norm_projections(x, nw, 1e-6, "llama", ws, bs)):
        assert_rounding_close(g, r)


def test_misuse_is_refused_with_the_argument_named():
    x, nw, ws, _ = make(2, torch.bfloat16)
    with pytest.raises(ValueError, match="1 to 3 weights"):
        sm.norm_projections(x, nw, 1e-6, "llama", ws * 2)
    with pytest.raises(ValueError, match="norm_kind"):
        sm.norm_projections(x, nw, 1e-6, "layer", ws)
    with pytest.raises(ValueError, match="does not fit x"):
        sm.linear_residual(x, ws[0][:, :8], None, x)
    with pytest.raises(ValueError, match="activation"):
        sm.norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[0], "relu")


def test_the_ops_above_batch_1_are_read_from_their_setting():
    from accelerate_graph.common.errors import BadOptionError

    parsed = lambda text: settings.from_text({"skinny_batches": text}, "--set").skinny_batches  # noqa: E731
    assert layer_program.ops_above_batch_1(parsed("auto")) is None  # the default: the shapes that won
    assert layer_program.ops_above_batch_1(parsed("0")) == frozenset()
    assert layer_program.ops_above_batch_1(parsed("on")) == frozenset(layer_program.SKINNY_OPS)
    assert layer_program.ops_above_batch_1(parsed(" residual, gate_up ")) == {"residual", "gate_up"}
    with pytest.raises(BadOptionError, match="skinny_batches"):
        parsed("residual,down")


def decodes_like_hf(model, session, prompt, cases, expected) -> None:
    """The merged layer program's steps (inductor off: dynamo cannot trace the interpreter's launches)
    give HF's forward's logits."""
    from accelerate_graph.fused.layers import FusedForward

    torch._dynamo.reset()
    fused = FusedForward(model, backend="eager", ops=layer_program.MERGED_OPS)
    with torch.compiler.set_stance("force_eager"):
        got = session.first_steps(prompt, cases, fused)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# (skinny_batch_1, skinny_batches, whether the tuning table serves): the regimes of the switches
SWEPT_REGIMES = {
    "auto-off-untuned": ("auto", "off", False),
    "auto-off-tuned": ("auto", "off", True),
    "on-off-untuned": ("on", "off", False),
    "off-off-tuned": ("off", "off", True),
    "off-on-tuned": ("off", "on", True),
    "on-on-untuned": ("on", "on", False),
    "off-residual-tuned": ("off", "residual", True),
    "off-auto-tuned": ("off", "auto", True),
    "won-rows": None,  # skinny_batches=auto over SKINNY_WINS_ABOVE_BATCH_1's row limits
}


@interpreted
@pytest.mark.parametrize("regime", list(SWEPT_REGIMES))
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_merged_program_runs_the_skinny_kernels_at_batch_1_where_swept(model_type, regime, monkeypatch, tmp_path):
    """layer_program's merged ops at batch 1: the skinny kernels for the shapes their table has (the four
    folded ops of every layer, one row each, decoding like HF's forward), every shape when forced, inductor's
    way otherwise; above batch 1 only the ops skinny_batches names (then at every shape, whatever the
    batch-1 rule says), by default the shapes that won in a step; decoding like HF's forward."""
    from tiny_models import every_op_up_to, grouped_decode_cases

    from accelerate_graph.fused import layer_program

    launches = []
    launch = sm.launch
    monkeypatch.setattr(
        sm, "launch", lambda op, x, *a, **kw: launches.append((op, x.shape[0])) or launch(op, x, *a, **kw)
    )
    model, session, prompt, cases, expected = grouped_decode_cases(model_type)
    text = model.config
    hidden, inter, layers = text.hidden_size, text.intermediate_size, text.num_hidden_layers
    assert [batch for batch, _ in cases] == [2, 1]
    all_four = [("proj", 1), ("residual", 1), ("gate_up", 1), ("residual", 1)] * layers
    at_two = [("proj", 2), ("residual", 2), ("gate_up", 2), ("residual", 2)] * layers
    if SWEPT_REGIMES[regime] is None:
        # the default at shapes that won in a step, up to their rows: o and down at 2 rows, nothing else
        won = {("residual", hidden, hidden): 4, ("residual", hidden, inter): 4}
        with settings.use(settings.DEFAULTS.replace(skinny_batch_1="off", skinny_batches="auto")):
            for limits, want in [(2, at_two), (8, at_two)]:  # every op, up to 2 or to 8 rows
                launches.clear()
                monkeypatch.setattr(layer_program, "SKINNY_WINS_ABOVE_BATCH_1", {**won, **every_op_up_to(text, limits)})
                decodes_like_hf(model, session, prompt, cases, expected)
                assert launches == want
            launches.clear()
            monkeypatch.setattr(layer_program, "SKINNY_WINS_ABOVE_BATCH_1", won)
            decodes_like_hf(model, session, prompt, cases, expected)
            assert launches == [("residual", 2), ("residual", 2)] * layers
            assert layer_program.layer_ops_above_batch_1(model.model.layers[0]) == {"residual": 4}
        return
    head_dim = hidden // text.num_attention_heads
    qkv = (text.num_attention_heads + 2 * text.num_key_value_heads) * head_dim
    swept = {("proj", (qkv,), hidden), ("residual", (hidden,), hidden), ("gate_up", (inter,), hidden)}
    swept.add(("residual", (hidden,), inter))
    from accelerate_graph.tune.table import merge_into

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entries = {configs.table_key(op, 1, ns, k): SkinnyConfig(8, 64) for op, ns, k in swept}
    merge_into(configs.user_table_path("Test GPU"), entries, "Test GPU", {})
    configs.forget_tables()
    at_one_setting, above, tuned = SWEPT_REGIMES[regime]
    device_name = "Test GPU" if tuned else "GPU without a table"  # the device names whose tables serve
    want = {  # the launches of the two cases: two rows, then one
        "auto-off-untuned": [],
        "auto-off-tuned": all_four,
        "on-off-untuned": all_four,
        "off-off-tuned": [],
        "off-on-tuned": at_two,
        "on-on-untuned": at_two + all_four,
        "off-residual-tuned": [("residual", 2), ("residual", 2)] * layers,
        "off-auto-tuned": [],  # the default: this model's o and down are not among the shapes that won
    }[regime]
    try:
        with (
            configs.use_device(device_name),
            settings.use(settings.DEFAULTS.replace(skinny_batch_1=at_one_setting, skinny_batches=above)),
        ):
            decodes_like_hf(model, session, prompt, cases, expected)
            assert launches == want
            every_op = ",".join(layer_program.SKINNY_OPS)
            named = {"on": every_op, "off": "", "auto": ""}.get(above, above)
            every = {op: layer_program.EVERY_ROW for op in named.split(",") if op}
            assert layer_program.layer_ops_above_batch_1(model.model.layers[0]) == every
            at_one = any(rows == 1 for _, rows in want)
            assert layer_program.layer_at_batch_1_is_skinny(model.model.layers[0]) == at_one  # what notes say
    finally:
        configs.forget_tables()


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_batches_share_a_class_where_the_same_calls_run_the_skinny_kernels(model_type, monkeypatch):
    """skinny_calls_at: the calls that run the skinny kernels at a row count, FusedForward's batch class.
    A row limit splits the batches above 1 in two classes (each its own compiled graph); the switch's
    ops run at every row."""
    from tiny_models import every_op_up_to, tiny_decoder

    from accelerate_graph.fused import layer_program

    model = tiny_decoder(model_type)
    layer = model.model.layers[0]
    calls = frozenset(layer_program.folded_calls(layer))
    o_and_down = frozenset(c for c in calls if c[0] == "residual")
    limits = every_op_up_to(model.config, 8)
    limits.update({(op, n[0], k): 32 for op, n, k in o_and_down})
    monkeypatch.setattr(layer_program, "SKINNY_WINS_ABOVE_BATCH_1", limits)
    with settings.use(settings.DEFAULTS.replace(skinny_batch_1="off", skinny_batches="auto")):
        at = {rows: layer_program.skinny_calls_at(layer, rows) for rows in (1, 2, 8, 9, 16, 32, 33)}
        assert layer_program.layer_ops_above_batch_1(layer) == {"proj": 8, "gate_up": 8, "residual": 32}
    assert at[1] == frozenset()  # batch 1 follows its own rule
    assert at[2] == at[8] == calls
    assert at[9] == at[16] == at[32] == o_and_down
    assert at[33] == frozenset()
    with settings.use(settings.DEFAULTS.replace(skinny_batch_1="off", skinny_batches="gate_up")):
        classes = {layer_program.skinny_calls_at(layer, rows) for rows in (2, 33, 1000)}
    assert classes == {frozenset(c for c in calls if c[0] == "gate_up")}


@pytest.mark.parametrize("name", ["norm_projections", "linear_residual", "norm_gate_up"])
def test_the_opaque_pdl_twins_are_the_ops_under_another_registration(name, monkeypatch):
    """Under PDL (pdl.active) the public functions call the `*_pdl` ops, opaque custom ops over the
    same bodies: their schemas and fake outputs pass torch's opcheck, and they compute what the ops do."""
    x, nw, ws, bs = make(1, torch.float32)
    residual = torch.randn(1, NS[0])
    calls = {
        "norm_projections": (sm.norm_projections, (x, nw, 1e-6, "llama", ws, bs)),
        "linear_residual": (sm.linear_residual, (x, ws[0], bs[0], residual)),
        "norm_gate_up": (sm.norm_gate_up, (x, nw, 1e-6, "llama", ws[1], ws[2], "silu")),
    }
    public, args = calls[name]
    op_args = tuple(list(a) if isinstance(a, (list, tuple)) else a for a in args)
    torch.library.opcheck(getattr(torch.ops.cugraph_accel, f"{name}_pdl").default, op_args)
    plain = public(*args)
    called = []
    monkeypatch.setattr(pdl, "active", lambda device: called.append(device) or True)  # as on a Hopper GPU
    monkeypatch.setattr(pdl, "launch_options", lambda device: {})  # the interpreter has no PDL to launch with
    twin = public(*args)
    assert called, "the public function did not ask whether PDL is on"
    for a, b in zip(plain if isinstance(plain, tuple) else (plain,), twin if isinstance(twin, tuple) else (twin,)):
        assert torch.equal(a, b)


# Children the interpreter tests of this file are shared among (pytest-xdist's workers run them side by side):
# one, since each child's start (torch, triton, collection) costs about as much as its share of the tests.
FRESH_PROCESS_SHARDS = 1


def run_interpreted_in_a_fresh_process(test_file: str, shard: int = 0, shards: int = 1) -> None:
    """Triton was imported before conftest.py could switch the interpreter on (the whole suite): run
    `test_file`'s interpreter tests (every `shards`-th from the `shard`-th) in a child whose environment has
    the switch from the start."""
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")]),
        "INTERPRETER_TESTS_SHARD": f"{shard}/{shards}",  # conftest.py's SHARD
    }
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k", "not fresh_process"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    tail = child.stdout[-3000:]
    assert child.returncode == 0, tail
    assert " passed" in tail and "needs triton imported under" not in child.stdout, tail  # the -ra summary


@pytest.mark.skipif(not FRESH_PROCESS, reason="the interpreter tests run in this process (or on a GPU)")
@pytest.mark.parametrize("shard", range(FRESH_PROCESS_SHARDS))
def test_interpreter_tests_in_a_fresh_process(shard):
    run_interpreted_in_a_fresh_process(__file__, shard, FRESH_PROCESS_SHARDS)


# ---------------------------------------------------------------- configs


def test_block_rows_and_buckets():
    fma, dot = SkinnyConfig(32, 128), SkinnyConfig(64, 128, dot=True)
    assert [fma.block_m(m) for m in (1, 2, 3, 8, 9, 32, 100)] == [1, 2, 4, 8, 16, 32, 32]
    assert [dot.block_m(m) for m in (1, 8, 17, 32)] == [16, 16, 32, 32]
    assert [configs.m_bucket(m) for m in (1, 2, 8, 9, 32, 64)] == [1, 8, 8, 16, 32, 32]


def test_table_round_trip_and_lookup(tmp_path, monkeypatch):
    from accelerate_graph.tune.table import merge_into

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    key = configs.table_key("residual", 8, (4096,), 14336)
    cfg = SkinnyConfig(32, 256, num_warps=8, num_stages=4, split_k=2, dot=True)
    merge_into(configs.user_table_path("Test GPU"), {key: cfg}, "Test GPU", {})
    assert configs.read_table(configs.user_table_path("Test GPU")) == {key: cfg}
    configs.forget_tables()
    try:
        with configs.use_device("Test GPU"):
            assert configs.config_for("residual", 5, (4096,), 14336) == cfg  # 5 rows: bucket 8
            heuristic = configs.heuristic("residual", 9, (4096,), 14336)
            assert configs.config_for("residual", 9, (4096,), 14336) == heuristic
    finally:
        configs.forget_tables()


def test_heuristic_gives_every_multiprocessor_a_program_on_8b_shapes():
    for m in (1, 8, 16, 32):
        for ns, k in (((4096, 1024, 1024), 4096), ((4096,), 14336), ((14336,), 4096)):
            cfg = configs.heuristic("proj", m, ns, k, sms=132)
            assert sum(-(-n // cfg.block_n) for n in ns) >= 132, (m, ns, cfg)
            assert cfg.dot == (m > 2)


# ---------------------------------------------------------------- GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
GPU_CONFIGS = {
    "heuristic": None,
    "fma": SkinnyConfig(32, 128),
    "dot": SkinnyConfig(64, 64, dot=True),
    "split": SkinnyConfig(16, 256, split_k=4, dot=True),
    "gemv": SkinnyConfig(2, 1024, num_warps=8, num_stages=1),  # the narrow kind step_sweep.py picks at batch 1
    "gemv-ahead": SkinnyConfig(2, 512, num_warps=4, num_stages=1, lookahead=True),  # the next K block ahead
    "fma-ahead": SkinnyConfig(16, 256, num_stages=2, lookahead=True),
    "swap": SkinnyConfig(64, 128, num_stages=4, dot=True, swap=True),  # warpgroup MMA, the weights its long side
    "swap-split": SkinnyConfig(128, 64, num_stages=6, split_k=2, dot=True, swap=True),
    # tune/grids.narrow_rows_grid's smallest tile: 16 weights on the MMA's long side, K in 4 slices
    "swap-narrow": SkinnyConfig(16, 64, num_stages=4, split_k=4, dot=True, swap=True),
    # several rows without tensor cores, the products summed over the K walk (skinny_kernels._accumulate_rows)
    "fma-rows": SkinnyConfig(8, 128, num_stages=1),
    "fma-rows-split": SkinnyConfig(8, 128, num_stages=1, split_k=2),
    # a whole-K tile: a program's whole K walk (896 and 1,000 of the shapes) in one block,
    # and K in slices of one block each (the long K of 4,864 and 1,400: 5 and 2 slices)
    "whole-k": SkinnyConfig(16, 1024, num_stages=1, dot=True, swap=True),
    "whole-k-plain": SkinnyConfig(32, 512, num_warps=8, num_stages=1, split_k=2, dot=True),
}
# Batch 1 (what fused mode runs for the shapes of the table) with every kind of config; more rows (the
# opt-in "kernels" program) with the heuristic's. Every case compiles its own kernels: H200, 2026-12-01,
# the full 40-case cross product took over 3 minutes, some cases ~20 s each (fma tiles at 17-32 rows).
GPU_CASES = [(1, name) for name in GPU_CONFIGS] + [(m, "heuristic") for m in (3, 8, 17, 32)]
GPU_CASES += [(m, "swap") for m in (3, 8, 17, 32)] + [(8, "swap-split")] + [(m, "swap-narrow") for m in (8, 32)]
GPU_CASES += [(m, "fma-rows") for m in (3, 8, 16)] + [(8, "fma-rows-split")]
GPU_CASES += [(m, "whole-k") for m in (8, 32)] + [(16, "whole-k-plain")]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("m", "cfg_name"), GPU_CASES, ids=[f"{name}-{m}" for m, name in GPU_CASES])
@pytest.mark.parametrize("shape", [(896, (896, 128, 128), 4864), (1000, (520, 72, 72), 1400)])
def test_gpu_bf16_against_the_reference(m, cfg_name, shape, monkeypatch):
    cfg = GPU_CONFIGS[cfg_name]
    if cfg is not None:
        monkeypatch.setattr(configs, "config_for", lambda *args, **kwargs: cfg)
    hidden, ns, inter = shape
    x, nw, ws, bs = make(m, torch.bfloat16, "cuda", k=hidden, ns=ns, seed=m)
    got = sm.norm_projections(x, nw, 1e-6, "llama", ws, bs)
    for g, r in zip(got, sm.reference_norm_projections(x, nw, 1e-6, "llama", ws, bs)):
        assert_rounding_close(g, r)
    _, _, (wg, wu), _ = make(m, torch.bfloat16, "cuda", k=hidden, ns=(inter, inter), seed=m + 1)
    act = sm.norm_gate_up(x, nw, 1e-6, "gemma", wg, wu, "gelu_tanh")
    assert_rounding_close(act, sm.reference_norm_gate_up(x, nw, 1e-6, "gemma", wg, wu, "gelu_tanh"))
    _, _, (wd,), _ = make(m, torch.bfloat16, "cuda", k=inter, ns=(hidden,), seed=m + 2)
    assert_rounding_close(sm.linear_residual(act, wd, None, x), sm.reference_linear_residual(act, wd, None, x))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("m", "cfg_name"), [(1, "gemv"), (8, "swap"), (8, "split"), (32, "heuristic")])
def test_gpu_a_nan_in_a_row_reaches_that_rows_outputs_through_every_op(m, cfg_name, monkeypatch):
    """The norm, the residual add and act(gate) * up keep a NaN of x's row 3 (the GPU's NaN once rounded by
    bit arithmetic came out -0.0, and the row went on finite); the other rows' bits are unchanged."""
    cfg = GPU_CONFIGS[cfg_name]
    if cfg is not None:
        monkeypatch.setattr(configs, "config_for", lambda *args, **kwargs: cfg)
    x, nw, ws, bs = make(m, torch.bfloat16, "cuda", k=896, ns=(896, 128, 128), seed=m)
    residual = make(m, torch.bfloat16, "cuda", k=896, seed=m + 1)[0]

    def every_op(x):
        return [
            *sm.norm_projections(x, nw, 1e-6, "llama", ws, bs),
            sm.norm_gate_up(x, nw, 1e-6, "llama", ws[1], ws[2], "silu"),
            sm.linear_residual(x, ws[0], bs[0], residual),
        ]

    clean = every_op(x)
    row = min(3, m - 1)
    x[row, 5] = float("nan")
    others = [r for r in range(m) if r != row]
    for got, was in zip(every_op(x), clean):
        assert got[row].isnan().all(), got[row]
        assert torch.equal(got[others], was[others])


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("m", "k"), [(1, 2048), (1, 8192), (8, 2048), (32, 896)])
def test_gpu_row_norm_in_unrolled_loads_against_the_reference(m, k):
    """The table's or the heuristic's configs with each program's rows read in rstd_chunks' unrolled loads
    (one at 1 row up to 4,096 values, two at 8,192; 8 at 8 rows)."""
    x, nw, ws, bs = make(m, torch.bfloat16, "cuda", k=k, ns=(k, 256, 256), seed=m)
    for g, r in zip(
        sm.norm_projections(x, nw, 1e-6, "llama", ws, bs), sm.reference_norm_projections(x, nw, 1e-6, "llama", ws, bs)
    ):
        assert_rounding_close(g, r)
    got = sm.norm_gate_up(x, nw, 1e-6, "llama", ws[1], ws[2], "silu")
    assert_rounding_close(got, sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[1], ws[2], "silu"))
    assert_rounding_close(sm.rms_norm(x, nw, 1e-6), sm.reference_rms_norm(x, nw, 1e-6, "llama"))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("rows", "k"), [(1, 2048), (32, 896), (8, 4096), (3, 5000)])
def test_gpu_rms_norm_kernel_against_the_reference(rows, k):
    x, nw, _, _ = make(rows, torch.bfloat16, "cuda", k=k, ns=(8,), seed=rows)
    assert_rounding_close(sm.rms_norm(x[:, None], nw, 1e-5), sm.reference_rms_norm(x[:, None], nw, 1e-5, "llama"))


class TinyLayer(torch.nn.Module):
    """A Qwen2-like decoder layer's projections, written with the ops the way fused/layers would."""

    def __init__(self, hidden=256, inter=512, heads=(4, 2), head_dim=64):
        super().__init__()
        lin = torch.nn.Linear
        q_out, kv_out = heads[0] * head_dim, heads[1] * head_dim
        self.q, self.k, self.v = lin(hidden, q_out), lin(hidden, kv_out), lin(hidden, kv_out)
        self.o, self.down = lin(q_out, hidden, bias=False), lin(inter, hidden, bias=False)
        self.gate, self.up = lin(hidden, inter, bias=False), lin(hidden, inter, bias=False)
        self.norm1 = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.norm2 = torch.nn.Parameter(torch.rand(hidden) + 0.5)
        self.heads = heads

    def forward(self, h):
        qkv = [self.q, self.k, self.v]
        q, k, v = sm.norm_projections(h, self.norm1, 1e-6, "llama", [p.weight for p in qkv], [p.bias for p in qkv])
        attn = q + torch.cat([k] * (self.heads[0] // self.heads[1]), dim=-1)  # one rounding, compiled or not
        h = sm.linear_residual(attn, self.o.weight, None, h)
        act = sm.norm_gate_up(h, self.norm2, 1e-6, "llama", self.gate.weight, self.up.weight, "silu")
        return sm.linear_residual(act, self.down.weight, None, h), v


@pytest.mark.cuda
@needs_cuda
def test_gpu_ops_compile_with_inductor_and_replay_in_a_cuda_graph():
    layer = TinyLayer().to("cuda", torch.bfloat16).eval()
    compiled = torch.compile(layer, backend="inductor", fullgraph=True)
    static_in = torch.randn(8, 1, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager = layer(static_in)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                for got, want in zip(compiled(static_in), eager):
                    assert_rounding_close(got, want)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_outs = compiled(static_in)
        for seed in range(3):
            static_in.copy_(torch.randn(8, 1, 256, generator=torch.Generator().manual_seed(seed)).to(static_in))
            graph.replay()
            torch.cuda.synchronize()
            for got, want in zip(static_outs, layer(static_in)):
                assert_rounding_close(got, want)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("hidden", "inter"), [(2048, 8192), (896, 4864)])  # Llama-3.2-1B's, Qwen2.5-0.5B's
def test_gpu_one_row_with_the_next_block_ahead_is_the_plain_sum_bit_for_bit(hidden, inter, monkeypatch):
    """SkinnyConfig.lookahead on the GPU, at batch 1's shapes: each op equals the plain loop's output bit
    for bit (same sums in the same order), with the narrow and the wide kinds of tile."""
    x, nw, ws, bs = make(1, torch.bfloat16, "cuda", k=hidden, ns=(inter, inter, 256), seed=1)
    wd = make(1, torch.bfloat16, "cuda", k=inter, ns=(hidden,), seed=2)[2][0]
    for plain in (SkinnyConfig(16, 256, num_stages=2), SkinnyConfig(2, 512, num_stages=1)):
        outs = {}
        for ahead in (False, True):
            cfg = dataclasses.replace(plain, lookahead=ahead)
            monkeypatch.setattr(configs, "config_for", lambda *args, cfg=cfg, **kwargs: cfg)
            act = sm.norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu")
            outs[ahead] = [*sm.norm_projections(x, nw, 1e-6, "llama", ws[1:], bs[1:]), act]
            outs[ahead].append(sm.linear_residual(act, wd, None, x))
        for got, want in zip(outs[True], outs[False]):
            assert torch.equal(got, want), plain
        assert_rounding_close(outs[True][2], sm.reference_norm_gate_up(x, nw, 1e-6, "llama", ws[0], ws[1], "silu"))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not pdl.HAS_GDC, reason="needs triton's gdc functions")
def test_gpu_pdl_launches_replay_what_plain_launches_compute():
    """Setting pdl: the kernels launched with PDL (prefetch, wait, early launch of the next)
    inside a compiled layer and a CUDA graph compute what plain launches do, bit for bit, over several
    inputs: a wait in the wrong place would read a half-written x or residual."""
    layer = TinyLayer().to("cuda", torch.bfloat16).eval()
    static_in = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
    graphs = {}
    for early in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(layer, backend="inductor", fullgraph=True)
        with torch.no_grad(), settings.use(settings.DEFAULTS.replace(pdl=early)):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                compiled(static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = compiled(static_in)
        graphs[early] = (graph, outs)
    for seed in range(4):
        static_in.copy_(torch.randn(1, 1, 256, generator=torch.Generator().manual_seed(seed)).to(static_in))
        results = {}
        for early, (graph, outs) in graphs.items():
            graph.replay()
            torch.cuda.synchronize()
            results[early] = [o.clone() for o in outs]
        for plain, launched_early in zip(results[False], results[True]):
            assert torch.equal(plain, launched_early)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("hidden", "inter", "rows"), [(2048, 8192, 8), (896, 4864, 16), (2048, 8192, 32)])
def test_gpu_split_k_finish_replays_what_direct_launches_compute(hidden, inter, rows, monkeypatch):
    """Split-K's finish (finish_kernel with PDL up to FINISH_HERE_ABOVE_ROWS rows, the last slice of each
    block above) on down's shapes at the rows the table splits them (the 1B's, Qwen's), captured in a CUDA
    graph behind gate/up and replayed over several inputs: the bits of direct launches and close to the
    reference. A finish reading a partial before its slice wrote it, or counters left non-zero, would not."""
    from accelerate_graph.fused.kernels import arrival

    gen = torch.Generator(device="cuda").manual_seed(rows)
    x = torch.empty(rows, hidden, device="cuda", dtype=torch.bfloat16)
    nw = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=gen)).to(torch.bfloat16)
    wg, wu = (torch.randn(inter, hidden, device="cuda", generator=gen).to(torch.bfloat16) * hidden**-0.5 for _ in "gu")
    wd = torch.randn(hidden, inter, device="cuda", generator=gen).to(torch.bfloat16) * inter**-0.5
    monkeypatch.setattr(
        configs, "config_for", lambda *args, **kwargs: SkinnyConfig(64, 128, 4, 4, split_k=4, dot=True, swap=True)
    )

    def down_after_gate_up():
        return sm.linear_residual(sm.norm_gate_up(x, nw, 1e-6, "llama", wg, wu, "silu"), wd, None, x)

    sm.prepare_split_finish(x.device)
    graph, out = captured(down_after_gate_up)
    for _ in range(4):
        x.copy_(torch.randn(rows, hidden, device="cuda", generator=gen))
        graph.replay()
        torch.cuda.synchronize()
        assert all(int(c.count_nonzero()) == 0 for c in arrival._counters.values())
        assert torch.equal(out, down_after_gate_up())
        gated = sm.reference_norm_gate_up(x, nw, 1e-6, "llama", wg, wu, "silu")
        assert_rounding_close(out, sm.reference_linear_residual(gated, wd, None, x), ulps=4)


def test_a_real_launch_goes_to_the_kernel_and_a_traced_one_through_torchs_wrapper(monkeypatch):
    """A launch not traced calls the kernel itself: through torch's wrapper the setup takes seconds longer.
    A traced one must go through it, or the trace would not record it."""

    class Kernel:
        def __init__(self):
            self.grids = []

        def __getitem__(self, grid):
            return lambda *args, **kwargs: self.grids.append(grid)

    class Tracing(torch.Tensor):  # stands for make_fx's fake and functional tensors
        pass

    kernel, wrapped = Kernel(), []
    monkeypatch.setattr(torch.library, "wrap_triton", lambda k: wrapped.append(k) or k)
    real = torch.zeros(2)
    sm._launcher(kernel, (3,), traced=sm._traced(real))(real)
    assert not sm._traced(real) and wrapped == [] and kernel.grids == [(3,)]
    fake = real.as_subclass(Tracing)
    sm._launcher(kernel, (4,), traced=sm._traced(fake))(fake)
    assert sm._traced(fake) and wrapped == [kernel] and kernel.grids == [(3,), (4,)]


def test_pdl_is_active_on_hopper_gpus_only_and_can_be_turned_off(monkeypatch):
    """PDL is on by default, for CUDA devices of compute capability 9.0 and up (an A100 would refuse the
    launch attribute); the pdl setting off turns it off everywhere."""
    capability = {}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability["now"])
    monkeypatch.setattr(pdl, "HAS_GDC", True)
    found = {}
    for name, cap in (("a100", (8, 0)), ("h200", (9, 0)), ("b200", (10, 0))):
        pdl._CAPABLE.clear()
        capability["now"] = cap
        found[name] = pdl.active(torch.device("cuda", 0))
    assert found == {"a100": False, "h200": True, "b200": True}
    assert not pdl.active(torch.device("cpu"))
    with settings.use(settings.DEFAULTS.replace(pdl=False)):
        assert not pdl.enabled() and not pdl.active(torch.device("cuda", 0))
    assert pdl.enabled() and pdl.active(torch.device("cuda", 0))
    pdl._CAPABLE.clear()


def test_the_kernel_choices_trace_inside_a_compiled_layer_without_a_break(monkeypatch):
    """The skinny table, the settings and PDL are asked while dynamo traces a layer: a file read or a
    functools.cache there broke the graph (and printed dynamo's warnings into `bench`'s output). Other
    settings under settings.use give another graph, not the first one's choices."""
    monkeypatch.setattr(pdl, "HAS_GDC", True)
    monkeypatch.setitem(pdl._CAPABLE, 0, True)  # as fused.layers leaves it on an H200, before compiling
    gpu = torch.device("cuda", 0)

    def choices(x):
        skinny = layer_program.skinny_at_batch_1("proj", (6144,), 4096)  # the 8B's q/k/v: in the table
        every_row = layer_program.skinny_rows_above_batch_1("gate_up", (6144,), 4096) == layer_program.EVERY_ROW
        return x + int(skinny) + 2 * int(pdl.active(gpu)) + 4 * int(every_row)

    torch._dynamo.reset()
    compiled = torch.compile(choices, backend="eager", fullgraph=True)
    with configs.use_device("NVIDIA H200"):  # the shipped table, which has the 8B's q/k/v at batch 1
        with settings.use(settings.DEFAULTS):
            assert compiled(torch.zeros(1)).item() == 3
        with settings.use(settings.DEFAULTS.replace(pdl=False, skinny_batch_1="off", skinny_batches="gate_up")):
            assert compiled(torch.zeros(1)).item() == 4


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not pdl.HAS_GDC, reason="needs triton's gdc functions")
def test_gpu_final_norm_launched_early_replays_what_plain_launches_compute():
    """The step's end at batch 1 under PDL: the last layer's down (linear_residual), the final norm, the LM
    head (one weight, no norm), each launched early. Replayed in a CUDA graph over several inputs, bit for bit
    what plain launches give: a final norm reading its input before the kernel in front finished would not."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    hidden, inter, vocab = 2048, 8192, 4096
    w_down = torch.randn(hidden, inter, device="cuda", generator=gen).to(torch.bfloat16) * inter**-0.5
    w_head = torch.randn(vocab, hidden, device="cuda", generator=gen).to(torch.bfloat16) * hidden**-0.5
    nw = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=gen)).to(torch.bfloat16)
    act = torch.empty(1, inter, device="cuda", dtype=torch.bfloat16)
    residual = torch.empty(1, hidden, device="cuda", dtype=torch.bfloat16)

    def end_of_step():
        h = sm.linear_residual(act, w_down, None, residual)
        return sm.norm_projections(sm.rms_norm(h, nw, 1e-5), None, 0.0, "llama", [w_head], [None])[0]

    graphs = {}
    for early in (False, True):
        with settings.use(settings.DEFAULTS.replace(pdl=early)):
            graphs[early] = captured(end_of_step)
    for _ in range(4):
        act.copy_(torch.randn(1, inter, device="cuda", generator=gen))
        residual.copy_(torch.randn(1, hidden, device="cuda", generator=gen))
        results = {}
        for early, (graph, out) in graphs.items():
            graph.replay()
            torch.cuda.synchronize()
            results[early] = out.clone()
        assert torch.equal(results[True], results[False])
        h = sm.reference_linear_residual(act, w_down, None, residual)
        want = sm.reference_norm_projections(sm.reference_rms_norm(h, nw, 1e-5, "llama"), None, 0.0, "llama",
                                             [w_head], [None])[0]  # fmt: skip
        assert ((results[True].float() - want.float()).norm() / want.float().norm()).item() < 2e-2
