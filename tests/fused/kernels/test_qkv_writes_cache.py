"""The q/k/v projection that rotates q and k and writes k and v into the static cache in its epilogue
(skinny_matmul.norm_qkv_rope_write, layer_program.QKV_WRITES_CACHE): the kernel against its reference under
the Triton interpreter (conftest.py), the layer program with the switch on against off, inductor handing the
op the cache itself, and the reference against HF's own rotary embedding and cache write."""

import os

import pytest
import torch
from generated_code import top_level_arguments
from test_skinny_matmul import FRESH_PROCESS, assert_rounding_close, interpreted, run_interpreted_in_a_fresh_process

from accelerate_graph.fused import layer_program
from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels import skinny_matmul as sm
from accelerate_graph.fused.kernels.configs import SkinnyConfig

SLOTS, SLOT = 16, 9  # the written slot in the middle of the cache


def qkv_case(rows, head_dim, bias, dtype, device="cpu", heads=(4, 2), k=72, seed=0):
    """(args of norm_qkv_rope_write, cache) for `rows` rows: a merged weight for heads[0] q heads and heads[1]
    k/v heads, cos/sin of random positions in the model dtype (as HF's rotary module returns them), and a
    cache [rows, kv heads, SLOTS, head_dim] of random values (so a write to a wrong slot shows)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape, s=1.0: (torch.randn(*shape, generator=gen) * s).to(device, dtype)  # noqa: E731
    q_size, kv_size = heads[0] * head_dim, heads[1] * head_dim
    n = q_size + 2 * kv_size
    angles = torch.rand(rows, head_dim, generator=gen) * 100
    cos, sin = angles.cos().to(device, dtype), angles.sin().to(device, dtype)
    keys, values = rand(rows, heads[1], SLOTS, head_dim), rand(rows, heads[1], SLOTS, head_dim)
    slot = torch.tensor(SLOT, device=device)
    args = [rand(rows, k, s=3.0), rand(k, s=0.5) + 1, 1e-6, "llama", rand(n, k, s=k**-0.5)]
    args += [rand(n) if bias else None, cos, sin, keys, values, slot, q_size, kv_size, head_dim]
    return args


def run_both(args):
    """(q, keys, values) of the op and of its reference, each on its own copy of the cache."""
    ours, theirs = list(args), list(args)
    ours[8], ours[9] = args[8].clone(), args[9].clone()
    theirs[8], theirs[9] = args[8].clone(), args[9].clone()
    return (sm.norm_qkv_rope_write(*ours), ours[8], ours[9]), (sm.reference_norm_qkv_rope_write(*theirs), *theirs[8:10])


def assert_cache_close(got, want, before):
    """The written slot equal up to summation order, every other slot untouched (bit for bit)."""
    others = [s for s in range(SLOTS) if s != SLOT]
    assert torch.equal(got[:, :, others], before[:, :, others])
    assert torch.equal(want[:, :, others], before[:, :, others])
    assert_rounding_close(got[:, :, SLOT], want[:, :, SLOT])


# ---------------------------------------------------------------- the reference is HF's sequence


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "float32"])
def test_the_reference_is_hfs_rotary_and_static_cache_write(dtype):
    """reference_norm_qkv_rope_write against HF's own functions: apply_rotary_pos_emb on the split merged
    projection, and StaticLayer.update's write at the position (bit for bit: the same torch ops)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    args = qkv_case(3, 64, True, dtype)
    x, nw, eps, kind, w, b, cos, sin, keys, values, slot, q_size, kv_size, head_dim = args
    (qkv,) = sm.reference_norm_projections(x, nw, eps, kind, [w], [b])
    q, k, v = (t.view(3, 1, -1, head_dim).transpose(1, 2) for t in qkv.split((q_size, kv_size, kv_size), -1))
    q, k = apply_rotary_pos_emb(q, k, cos.unsqueeze(1), sin.unsqueeze(1))
    want_keys, want_values = keys.clone(), values.clone()
    want_keys[:, :, SLOT], want_values[:, :, SLOT] = k[:, :, 0], v[:, :, 0]
    got = sm.reference_norm_qkv_rope_write(*args)
    assert torch.equal(got, q.transpose(1, 2).reshape(3, q_size))
    assert torch.equal(keys, want_keys) and torch.equal(values, want_values)


def test_pairs_a_program_halve_the_configs_rows_within_half_a_head():
    assert [sm.rope_pairs(n, 64) for n in (1, 2, 4, 8, 16, 64, 128)] == [1, 1, 2, 4, 8, 32, 32]
    assert [sm.rope_pairs(n, 128) for n in (8, 256)] == [4, 64]
    assert sm.rope_pairs(16, 96) == 8 and sm.rope_pairs(64, 96) == 16  # 48 = 16 * 3: no 32 divides it
    assert sm.rope_pairs(16, 6) == 1  # 3 pairs a head: one a program


def test_misuse_is_refused_with_the_argument_named():
    args = qkv_case(1, 64, False, torch.float32)
    wrong_slot = list(args)
    wrong_slot[10] = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="slot one"):
        sm.norm_qkv_rope_write(*wrong_slot)
    wrong_cache = list(args)
    wrong_cache[8] = args[8][:, :1]
    with pytest.raises(ValueError, match="does not fit"):
        sm.norm_qkv_rope_write(*wrong_cache)
    odd = list(args)
    odd[11:14] = [4 * 63, 2 * 63, 63]
    with pytest.raises(ValueError, match="do not fit"):
        sm.norm_qkv_rope_write(*odd)


# ---------------------------------------------------------------- the kernel under the interpreter


@interpreted
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("model", ["llama", "qwen2"])  # Qwen2: q/k/v biases
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "float32"])
def test_the_kernel_rotates_and_writes_like_its_reference(rows, head_dim, model, dtype, monkeypatch):
    """q and the written slot equal the reference's up to the projection's summation order (bf16: bit for
    bit in these cases), every other slot of the cache untouched; 4 q heads over 2 k/v heads."""
    launches = []
    launch = sm.launch_qkv_rope_write
    monkeypatch.setattr(sm, "launch_qkv_rope_write", lambda *a, **k: launches.append(1) or launch(*a, **k))
    monkeypatch.setattr(configs, "config_for", lambda *a, **k: SkinnyConfig(8, 32))  # K 72: a masked block
    args = qkv_case(rows, head_dim, model == "qwen2", dtype, seed=rows + head_dim)
    (q, keys, values), (want_q, want_keys, want_values) = run_both(args)
    assert launches == [1]
    assert_rounding_close(q, want_q)
    assert_cache_close(keys, want_keys, args[8])
    assert_cache_close(values, want_values, args[9])
    if dtype == torch.bfloat16:  # eager's roundings reproduced exactly
        assert torch.equal(q, want_q) and torch.equal(keys, want_keys) and torch.equal(values, want_values)


@interpreted
@pytest.mark.parametrize("cfg", [SkinnyConfig(2, 64), SkinnyConfig(64, 128, dot=True, split_k=2)], ids=str)
def test_any_config_runs_one_pass_of_float32_sums(cfg, monkeypatch):
    """One pair a program, and a tensor-core split-K config: the kernel takes its block sizes only (no
    tl.dot, no split-K), and computes the same."""
    monkeypatch.setattr(configs, "config_for", lambda *a, **k: cfg)
    args = qkv_case(1, 64, True, torch.bfloat16, k=200)
    (q, keys, values), (want_q, want_keys, want_values) = run_both(args)
    assert torch.equal(q, want_q) and torch.equal(keys, want_keys) and torch.equal(values, want_values)


def _one_step(model, runner, batch):
    """One decode step of `batch` rows after a 6-token prompt: (logits, every layer's keys, values)."""
    from accelerate_graph.core.decode_session import DecodeSession

    session = DecodeSession(model, 2, 64)
    with torch.no_grad():
        session.prefill(torch.arange(12).reshape(2, 6) + 5)
        session.load_inputs(batch, torch.arange(batch) + 7, torch.full((batch,), 6))
        logits = session.step_fn(batch, 32, runner)()
    layers = session.kv.layers
    return logits, [layer.keys.clone() for layer in layers], [layer.values.clone() for layer in layers]


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_layer_program_with_the_switch_decodes_like_without(model_type, dtype, monkeypatch):
    """layer_program.decode_layer (merged ops, skinny kernels at batch 1) with QKV_WRITES_CACHE on and off:
    the same logits and the same cache, the op running once a layer at batch 1 and never at batch 2."""
    from tiny_models import tiny_decoder

    from accelerate_graph.fused.grouped_attention import use_grouped_attention
    from accelerate_graph.fused.layers import FusedForward

    launches = []
    launch = sm.launch_qkv_rope_write
    monkeypatch.setattr(sm, "launch_qkv_rope_write", lambda *a, **k: launches.append(1) or launch(*a, **k))
    monkeypatch.setattr(layer_program, "SKINNY_AT_BATCH_1", "1")
    model = tiny_decoder(model_type).to(dtype)
    use_grouped_attention(model)
    runs = {}
    for on in (False, True):
        monkeypatch.setattr(layer_program, "QKV_WRITES_CACHE", on)
        torch._dynamo.reset()
        fused = FusedForward(model, backend="eager", ops=layer_program.MERGED_OPS)
        with torch.compiler.set_stance("force_eager"):  # dynamo cannot trace the interpreter's launches
            runs[on] = [_one_step(model, fused, batch) for batch in (1, 2)]
    assert len(launches) == model.config.num_hidden_layers  # batch 1 only
    for (off_logits, off_keys, off_values), (on_logits, on_keys, on_values) in zip(runs[False], runs[True]):
        assert torch.equal(on_logits, off_logits)
        for a, b in zip(on_keys + on_values, off_keys + off_values):
            assert torch.equal(a, b)


@interpreted
def test_inductor_hands_the_op_the_cache_itself_and_copies_nothing(monkeypatch, tmp_path):
    """The op mutates keys/values, graph inputs of the compiled layer (views of the session's cache):
    functionalised, a mutation left as it is would clone the cache and copy it back, and without the
    flexible_layout tag inductor would copy it into a contiguous buffer (the attention op's lesson,
    H200: 197 us of an 8B step). Inductor (CPU) compiles the layer program at batch 1 with only q/k/v on our
    kernels (a table with that shape alone: the other ops are inductor's, which cannot trace interpreted
    kernels): the op is called on `argN` tensors, and no line copies or clones."""
    import re

    from tiny_models import tiny_decoder

    from accelerate_graph.compat.torch_internals import inductor_config_patched, inductor_generated_code
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused.grouped_attention import use_grouped_attention
    from accelerate_graph.fused.layers import FusedForward

    model = tiny_decoder("qwen2")
    use_grouped_attention(model)
    text = model.config
    head_dim = text.hidden_size // text.num_attention_heads
    qkv = (text.num_attention_heads + 2 * text.num_key_value_heads) * head_dim
    table = tmp_path / "table.json"
    configs.write_table({configs.table_key("proj", 1, (qkv,), text.hidden_size): SkinnyConfig(8, 64)}, table, "test")
    monkeypatch.setattr(configs, "TABLE_PATH", table)
    assert configs.in_table("proj", 1, (qkv,), text.hidden_size)  # read now: a file stat under tracing breaks it
    monkeypatch.setattr(layer_program, "SKINNY_AT_BATCH_1", "auto")
    monkeypatch.setattr(layer_program, "QKV_WRITES_CACHE", True)
    torch._dynamo.reset()
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    expected = session.first_steps(prompt, [(1, 32)])
    fused = FusedForward(model, backend="inductor", ops=layer_program.MERGED_OPS)
    with inductor_config_patched({"force_disable_caches": True}):  # its FX graph cache does not key on op tags
        got, code = inductor_generated_code(session.first_steps, prompt, [(1, 32)], fused)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-4, atol=1e-4)
    opened = r"norm_qkv_rope_write\.default\("
    calls = [source[found.end() :] for source in code for found in re.finditer(opened, source)]
    assert len(calls) == 1, code  # one layer class: one compiled program
    keys, values = top_level_arguments(calls[0])[8:10]
    assert keys.startswith("arg") and values.startswith("arg"), calls[0][:400]
    copies = [line.strip() for source in code for line in source.splitlines() if re.search(r"copy_|clone", line)]
    assert not copies, copies


def test_the_switch_is_off_by_default():
    assert layer_program.QKV_WRITES_CACHE is (os.environ.get("CUGRAPH_ACCEL_QKV_WRITES_CACHE", "0") == "1")


@pytest.mark.skipif(not FRESH_PROCESS, reason="the interpreter tests run in this process (or on a GPU)")
def test_interpreter_tests_in_a_fresh_process():
    run_interpreted_in_a_fresh_process(__file__)


# ---------------------------------------------------------------- GPU


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(
    ("hidden", "heads", "head_dim", "bias"),
    [(2048, (32, 8), 64, False), (896, (14, 2), 64, True), (4096, (32, 8), 128, False)],
    ids=["llama-3.2-1b", "qwen2.5-0.5b", "llama-3.1-8b"],
)
def test_gpu_bf16_against_the_reference(hidden, heads, head_dim, bias):
    """The real shapes at batch 1 in bf16 with the table's configs (PDL where the GPU has it): q and the
    written slot equal the reference's up to the projection's summation order, other slots untouched."""
    args = qkv_case(1, head_dim, bias, torch.bfloat16, "cuda", heads=heads, k=hidden, seed=hidden)
    (q, keys, values), (want_q, want_keys, want_values) = run_both(args)
    torch.cuda.synchronize()
    assert_rounding_close(q, want_q)
    assert_cache_close(keys, want_keys, args[8])
    assert_cache_close(values, want_values, args[9])
