"""The Triton decode-attention kernel (accelerate_graph/fused/kernels/decode_attention.py).

On the CPU it runs under the Triton interpreter, in a subprocess (interpreted_worker.py: the variable
must be set before triton is imported, and this process may hold the real triton), against a float32
reference and the matmul path it replaces. On a GPU: bf16 against the matmul path, inside inductor,
and inside a CUDA graph.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attention_cases import Attention, inputs, reference
from cuda_graphs import captured

from accelerate_graph import settings
from accelerate_graph.fused import grouped_attention
from accelerate_graph.fused.kernels import decode_attention as kernel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GQA = {"14/2": (14, 2), "32/8": (32, 8), "8/8": (8, 8)}  # Qwen2.5-0.5B, the Llamas, plain multi-head


def case(id, b, heads, d, length, mask, splits, block_l, **extra):
    hq, hkv = GQA[heads]
    return dict(id=id, b=b, hq=hq, hkv=hkv, d=d, L=length, mask=mask, splits=splits, block_l=block_l, **extra)


# Every batch, head layout, head dim, context length and mask kind, left-padded rows of different real
# lengths and empty slots after the current one; splits from 1 (no reduction kernel) to more than blocks.
CASES = [
    case("b1-14/2-d64-L16-bool", 1, "14/2", 64, 16, "bool", 1, 16),
    case("b3-14/2-d64-L100-bool-split4", 3, "14/2", 64, 100, "bool", 4, 32),
    case("b8-14/2-d128-L256-additive-split2", 8, "14/2", 128, 256, "additive", 2, 64),
    case("b3-14/2-d64-L1024-bool-split8", 3, "14/2", 64, 1024, "bool", 8, 128),
    case("b8-14/2-d64-L1024-additive-split4", 8, "14/2", 64, 1024, "additive", 4, 256),
    case("b1-14/2-d128-L1024-bool-split16", 1, "14/2", 128, 1024, "bool", 16, 64),
    case("b1-32/8-d64-L100-additive", 1, "32/8", 64, 100, "additive", 1, 64),
    case("b1-32/8-d128-L1024-bool-direct", 1, "32/8", 128, 1024, "bool", 1, 64),  # 16 blocks, no combine
    case("b3-32/8-d128-L16-bool-more-splits-than-blocks", 3, "32/8", 128, 16, "bool", 3, 16),
    case("b8-32/8-d64-L256-bool", 8, "32/8", 64, 256, "bool", 1, 128),
    case("b1-32/8-d128-L1024-additive-split4", 1, "32/8", 128, 1024, "additive", 4, 256),
    case("b8-8/8-d64-L100-bool-split2", 8, "8/8", 64, 100, "bool", 2, 64),
    case("b1-8/8-d128-L256-bool-split8", 1, "8/8", 128, 256, "bool", 8, 32),
    case("b3-8/8-d64-L16-additive", 3, "8/8", 64, 16, "additive", 1, 16),
    case("b3-8/8-d128-L1024-bool-split2", 3, "8/8", 128, 1024, "bool", 2, 256),
    case("no-mask", 3, "32/8", 64, 100, "none", 2, 32),
    case("mask-per-head", 3, "14/2", 64, 100, "bool", 2, 32, per_head=True),
    case("mask-batch-broadcast-additive", 3, "14/2", 64, 100, "additive", 2, 32, batch_broadcast=True),
    case("sliding-window-in-mask", 3, "8/8", 64, 256, "bool", 4, 32, window=40),
    case("padded-row-masked-everywhere", 3, "14/2", 64, 100, "bool", 4, 32, dead_row=1),
    case("padded-row-additive-direct", 3, "32/8", 64, 100, "bool", 1, 32, dead_row=2),
    case("softcap", 3, "14/2", 64, 100, "bool", 4, 32, softcap=5.0),
    case("softcap-additive-direct", 3, "32/8", 128, 100, "additive", 1, 64, softcap=2.0),
    case("bf16-bool", 3, "14/2", 64, 100, "bool", 4, 32, dtype="bfloat16"),
    case("bf16-additive", 3, "32/8", 128, 256, "additive", 2, 64, dtype="bfloat16"),
    case("fp16-bool", 3, "14/2", 128, 100, "bool", 1, 32, dtype="float16"),
]
# The bucket in one tile, mask, K and V loaded before the PDL wait (setting attention_preloaded, the value the
# parts of the head dimension): boolean masks of buckets up to 256 slots at a head dim of 64, 128 at 128.
PRELOADED = [
    {**case("b1-32/8-d64-L256-bool-preloaded", 1, "32/8", 64, 256, "bool", 1, 64), "preloaded": 2},
    {**case("b3-14/2-d64-L100-bool-preloaded", 3, "14/2", 64, 100, "bool", 1, 64), "preloaded": 2},
    {**case("b8-32/8-d64-L16-bool-preloaded-one-part", 8, "32/8", 64, 16, "bool", 1, 16), "preloaded": 1},
    {**case("b2-32/8-d128-L100-bool-preloaded-4-parts", 2, "32/8", 128, 100, "bool", 1, 64), "preloaded": 4},
    {**case("padded-row-preloaded", 3, "14/2", 64, 100, "bool", 1, 32, dead_row=1), "preloaded": 2},
    {**case("mask-per-head-preloaded", 3, "14/2", 64, 100, "bool", 1, 32, per_head=True), "preloaded": 2},
    {**case("sliding-window-preloaded", 3, "8/8", 64, 256, "bool", 1, 32, window=40), "preloaded": 2},
    {**case("softcap-preloaded", 3, "14/2", 64, 100, "bool", 1, 32, softcap=5.0), "preloaded": 2},
    {**case("batch-broadcast-preloaded", 3, "14/2", 64, 100, "bool", 1, 32, batch_broadcast=True), "preloaded": 2},
    {**case("bf16-preloaded", 3, "32/8", 64, 256, "bool", 1, 64, dtype="bfloat16"), "preloaded": 2},
]
CASES += PRELOADED
LOW_PRECISION = {"bfloat16": 2**-7, "float16": 2**-10}  # one unit in the last place at 1


def interpreted(job: dict) -> dict:
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(HERE)]),
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "interpreted_worker.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def case_results():
    return interpreted({"cases": CASES})


@pytest.mark.parametrize("spec", CASES, ids=[c["id"] for c in CASES])
def test_kernel_matches_the_reference_and_the_matmul_path(case_results, spec):
    got = case_results[spec["id"]]
    dtype = spec.get("dtype", "float32")
    assert got["shape"] == [spec["b"], 1, spec["hq"], spec["d"]] and got["dtype"] == dtype
    assert got["dead_rows_max"] == 0.0  # a row with nothing to attend gives zeros (the matmul path: NaN)
    assert (got["preloaded_parts"] > 0) == ("preloaded" in spec), got  # the kernel the case is about ran
    if dtype == "float32":
        assert got["vs_reference"] < 2e-5, got
        assert spec.get("softcap") or got["vs_current"] < 2e-5, got
    else:  # the interpreter rounds to bf16/fp16 itself; the GPU tests check the real rounding
        ulp = LOW_PRECISION[dtype]
        assert got["vs_reference"] <= 2 * got["current_vs_reference"] + ulp, got
        assert got["vs_current"] <= 4 * ulp, got


def test_the_op_compiles_once_for_every_larger_batch_and_context():
    got = interpreted({"compile": True})
    assert got["graphs"] == 2, got  # batch 1, and every larger batch with every context length
    assert got["max_error"] < 2e-5, got


def test_inductor_passes_the_cache_itself_not_a_copy():
    """Without the op's flexible_layout tag, inductor copied each layer's whole K/V cache into a
    contiguous buffer before every call (H200, 2026-12-01: 197 us of an 8B step at 1,024 slots)."""
    got = interpreted({"cache_reads": True})
    assert [name for name, _ in got["calls"]] == ["decode_attention"], got["calls"]  # one layer class: one call
    arguments = got["calls"][0][1]
    key, value = arguments[1:3]
    assert key.startswith("arg") and value.startswith("arg"), arguments
    copies = [line for line in got["copies"] if "index_copy" not in line]  # HF's own cache write
    assert not copies, copies


def test_grouped_attention_runs_the_kernel_when_switched_on():
    """A tiny GQA model's decode logits, eager and in fused mode's compiled layers, with the kernel on."""
    got = interpreted({"model": True})
    assert got["kernel_calls"] >= 2 * 3 * 2, got  # 2 layers x 3 cases, eager and compiled
    assert got["splits"] == [8, 16], got  # the fixed splits: 16 at batch 1, 8 above (2 K/V heads)
    assert got["eager_vs_matmul"] < 1e-4 and got["compiled_vs_matmul"] < 1e-4, got
    assert (got["graphs"], got["recompiles"]) == (2, 0), got


def test_the_length_splits_follow_each_context_in_compiled_layers_without_a_recompile():
    """attention_splits "length": the op picks its splits as it runs, per batch and context (at least 16 slots a
    split here, so the tiny contexts split), in eager and compiled layers alike, like the matmul path."""
    got = interpreted({"model": True, "attention_splits": "length", "split_slots": 16})
    assert got["splits"] == [1, 2, 4], got  # batch 1 over 16 slots, 4 rows over 32, 3 rows over 64
    assert got["eager_vs_matmul"] < 1e-4 and got["compiled_vs_matmul"] < 1e-4, got
    assert (got["graphs"], got["recompiles"]) == (2, 0), got


def test_the_length_splits_aim_at_about_two_programs_a_multiprocessor_and_128_slots_a_split_at_least():
    """length_config on the 8B's shape (8 K/V heads, d 128) over batches and lengths, as measured best."""
    splits = {(b, n): kernel.length_config(8, 128, b, n).splits for b in (1, 4, 8, 32) for n in (100, 256, 4096)}
    assert splits == {
        (1, 100): 1, (1, 256): 2, (1, 4096): 32,
        (4, 100): 1, (4, 256): 2, (4, 4096): 8,
        (8, 100): 1, (8, 256): 2, (8, 4096): 4,
        (32, 100): 1, (32, 256): 1, (32, 4096): 1,
    }  # fmt: skip
    assert kernel.length_config(2, 64, 1, 1 << 16).splits == kernel.MAX_SPLITS
    assert kernel.length_config(8, 96, 3, 3000).splits == 8  # 256 // 24 = 10 programs a split: a power of two below
    assert (kernel.length_config(8, 128, 1, 512).block_l, kernel.length_config(16, 256, 1, 512).block_l) == (128, 64)


def test_the_kernel_is_on_by_default_and_cpu_tensors_keep_the_matmul_path(monkeypatch):
    assert settings.DEFAULTS.triton_attention  # on since measured on the H200 (docs/PERF.md)
    # this folder's conftest may have turned the interpreter on for this process (triton not yet imported)
    monkeypatch.setattr(grouped_attention, "_INTERPRETED", False)
    monkeypatch.setattr(
        kernel, "launch", lambda *a, **k: pytest.fail("the kernel ran on CPU tensors without the interpreter")
    )
    query, key, value, mask = inputs(dict(b=2, hq=14, hkv=2, d=64, L=16, mask="bool"))
    with settings.use(settings.DEFAULTS.replace(triton_attention=True)):
        out, _ = grouped_attention.grouped_decode_attention(Attention().eval(), query, key, value, mask, 0.0, 0.125)
    torch.testing.assert_close(out, reference(query, key, value, mask, 0.125, 0.0), rtol=1e-5, atol=1e-5)


def test_the_fixed_splits_depend_on_the_batch_class_alone():
    """attention_splits "fixed" (plans captured before the length rule): 16 splits at batch 1, 2 above, any length."""
    assert kernel.fixed_config(2, batch_one=True).splits == 16
    assert kernel.fixed_config(8, batch_one=False).splits == 2
    assert settings.DEFAULTS.attention_splits == "length"


def preloaded(parts: int, max_batch: int = 1):
    """The settings with the preloaded attention at `parts` parts up to batch `max_batch`."""
    return settings.use(settings.DEFAULTS.replace(attention_preloaded=parts, attention_preloaded_batch=max_batch))


def test_the_preloaded_kernel_takes_short_buckets_with_a_boolean_mask_only():
    with preloaded(2):
        assert kernel.preloaded_parts(1, 64, 256, kernel.BOOL_MASK) == 2  # the 1B's and Qwen's bucket of 256
        assert kernel.preloaded_parts(1, 64, 257, kernel.BOOL_MASK) == 0  # 512 slots: the split kernel
        assert kernel.preloaded_parts(1, 128, 128, kernel.BOOL_MASK) == 2
        assert kernel.preloaded_parts(1, 128, 256, kernel.BOOL_MASK) == 0
        assert kernel.preloaded_parts(1, 64, 256, kernel.ADDITIVE_MASK) == 0
        assert kernel.preloaded_parts(1, 64, 256, kernel.NO_MASK) == 0
        assert kernel.preloaded_parts(2, 64, 256, kernel.BOOL_MASK) == 0  # above its batch (it rereads K per head)
    with preloaded(2, max_batch=4):
        assert kernel.preloaded_parts(4, 64, 256, kernel.BOOL_MASK) == 2
    with preloaded(0):
        assert kernel.preloaded_parts(1, 64, 256, kernel.BOOL_MASK) == 0  # off


def test_the_preloaded_kernel_runs_at_batch_1_with_4_parts_by_default():
    """The measured default (docs/PERF.md): 4 parts at batch 1 only."""
    with settings.use(settings.DEFAULTS):
        assert kernel.preloaded_parts(1, 64, 256, kernel.BOOL_MASK) == 4
        assert kernel.preloaded_parts(8, 64, 256, kernel.BOOL_MASK) == 0


@pytest.mark.parametrize("text", ["3", "two", "-2"])
def test_a_bad_preloaded_setting_is_one_clear_error(text):
    from accelerate_graph.common.errors import BadOptionError

    with pytest.raises(BadOptionError, match="attention_preloaded"):
        settings.from_text({"attention_preloaded": text}, "--set")


def test_unsupported_inputs_are_refused():
    query, key, value, mask = inputs(dict(b=2, hq=14, hkv=2, d=64, L=16, mask="bool"))
    assert kernel.supports(query, key, value, mask)
    assert not kernel.supports(query.expand(2, 14, 3, 64), key, value, mask)  # a prompt, not one token
    assert not kernel.supports(query, key, value[..., :32], mask)
    assert not kernel.supports(query, key.double(), value.double(), mask)
    assert not kernel.supports(query.expand(2, 14, 1, 64).repeat(1, 10, 1, 1)[:, :130], key[:, :1], value[:, :1], mask)


# GPU: the compiled kernel (not the interpreter), bf16 as fused mode runs it.
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
GPU_CASES = [c for c in CASES if "dtype" not in c] + [
    case("b32-32/8-d128-L4096-bool-split8", 32, "32/8", 128, 4096, "bool", 8, 64),
    case("b8-14/2-d64-L4096-additive-split16", 8, "14/2", 64, 4096, "additive", 16, 64),
]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("spec", GPU_CASES, ids=[c["id"] for c in GPU_CASES])
def test_gpu_kernel_matches_the_matmul_path(spec, dtype):
    spec = {**spec, "dtype": dtype}
    query, key, value, mask = inputs(spec, "cuda")
    scale, softcap = query.shape[-1] ** -0.5, spec.get("softcap", 0.0)
    config = kernel.DecodeConfig(block_l=spec["block_l"], num_warps=4, splits=spec["splits"])
    with preloaded(spec.get("preloaded", 0), max_batch=spec["b"]):  # the case's batch, whatever the default's
        out = kernel.launch(query, key, value, mask, scale, softcap, config).float()
    expected = reference(query, key, value, mask, scale, softcap)
    live = torch.ones(spec["b"], dtype=torch.bool, device="cuda")
    if spec.get("dead_row") is not None:
        live[spec["dead_row"]] = False
        assert out[~live].abs().max().item() == 0.0
    error = (out - expected)[live].abs().max().item()
    if dtype == "float32":
        assert error < 2e-5
    elif softcap:  # no matmul path to compare with: within bf16 rounding of the float32 reference
        assert error < 2e-2
    else:
        current, _ = grouped_attention.grouped_decode_attention(Attention().eval(), query, key, value, mask, 0.0, scale)
        current_error = (current.float() - expected)[live].abs().max().item()
        assert error <= 1.5 * current_error + 2**-8, (error, current_error)  # no worse than the matmul path


def layer_like(query, new_k, new_v, cache_k, cache_v, slot, mask, weight):
    """What a fused layer does around attention: writes the new K/V slot into the static cache, attends
    over the context bucket's view of it through grouped attention, projects."""
    cache_k.index_copy_(2, slot, new_k)
    cache_v.index_copy_(2, slot, new_v)
    length = mask.shape[-1]
    view_k, view_v = cache_k[:, :, :length], cache_v[:, :, :length]
    out, _ = grouped_attention.grouped_decode_attention(Attention().eval(), query, view_k, view_v, mask, 0.0, 0.125)
    return out.flatten(2) @ weight


class GpuLayer:
    """A bf16 static cache [b, 2, 257, 64] (14 query heads over 2 K/V heads, one spare slot) and an output
    projection on the GPU, with the inputs of one decode step drawn from one generator."""

    heads, kv_heads, head_dim, slots = 14, 2, 64, 256

    def __init__(self, batch: int):
        self.batch = batch
        self.gen = torch.Generator(device="cuda").manual_seed(0)
        self.cache_k, self.cache_v = (self.randn(batch, self.kv_heads, self.slots + 1, self.head_dim) for _ in "kv")
        self.weight = self.randn(self.heads * self.head_dim, 32)

    def randn(self, *shape):
        return torch.randn(*shape, device="cuda", generator=self.gen, dtype=torch.bfloat16)

    def token(self):
        """query [b, Hq, 1, d], the step's key and value [b, Hkv, 1, d]."""
        b, d = self.batch, self.head_dim
        return self.randn(b, self.heads, 1, d), self.randn(b, self.kv_heads, 1, d), self.randn(b, self.kv_heads, 1, d)

    def mask(self, length: int, now: int):
        """HF's boolean mask [b, 1, 1, length] with left padding: row r attends slots r..now."""
        mask = torch.zeros(self.batch, 1, 1, length, dtype=torch.bool, device="cuda")
        for row in range(self.batch):
            mask[row, ..., row : now + 1] = True
        torch._dynamo.maybe_mark_dynamic(mask, 3)
        return mask


def assert_like_the_matmul_path(got, want):
    # the projection sums 896 products of bf16-rounded attention outputs: one element of 128 may land
    # 0.06 away (H200, 2026-12-01); the norm of the difference is what a wrong read moves (1.4x it)
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < 1e-2
    torch.testing.assert_close(got, want, rtol=0.1, atol=0.1)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(
    ("batch", "early", "parts"),
    [(1, False, 0), (4, False, 0), (1, True, 0), (1, True, 2), (4, True, 2), (4, False, 1)],
    ids=["b1", "b4", "b1-pdl", "b1-pdl-preloaded", "b4-pdl-preloaded", "b4-preloaded"],
)  # fmt: skip
def test_gpu_kernel_inside_inductor_and_a_cuda_graph(batch, early, parts):
    """Inductor compiles the op with the layer's own kernels; one compilation serves every context
    length; a CUDA graph of the compiled step replays it with new inputs like the matmul path; also with
    the kernels launched early (PDL), where a wait in the wrong place would read the query or the slot
    just written before they are there; and with the bucket in one tile loaded before the wait
    (`parts` of the preloaded kernel), where the step's slot, written by the kernel in front, must be read
    again after it."""
    chosen = settings.DEFAULTS.replace(
        pdl=early, attention_preloaded=parts, attention_preloaded_batch=batch, triton_attention=True
    )
    with settings.use(chosen):
        _compiled_and_captured_like_the_matmul_path(batch, chosen)


def _compiled_and_captured_like_the_matmul_path(batch, chosen):
    from accelerate_graph.compat.torch_internals import dynamo_graph_count

    torch._dynamo.reset()
    layer = GpuLayer(batch)
    cache_k, cache_v, weight = layer.cache_k, layer.cache_v, layer.weight
    compiled = torch.compile(layer_like, backend="inductor")

    def arguments(length, now):
        query, new_k, new_v = layer.token()
        mask = layer.mask(length, now)
        for tensor in (query, new_k, new_v, mask):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        return query, new_k, new_v, torch.tensor([now], device="cuda"), mask

    def check(run, args):
        """`run` with the kernel against the matmul path, from the same cache contents."""
        before = cache_k.clone(), cache_v.clone()
        got = run().clone()
        cache_k.copy_(before[0]), cache_v.copy_(before[1])
        with settings.use(chosen.replace(triton_attention=False)):
            want = layer_like(*args[:3], cache_k, cache_v, *args[3:], weight)
        assert_like_the_matmul_path(got, want)

    before = dynamo_graph_count()
    for length, now in [(64, 40), (128, 100), (256, 200)]:
        args = arguments(length, now)
        check(lambda args=args: compiled(*args[:3], cache_k, cache_v, *args[3:], weight), args)
    assert dynamo_graph_count() - before <= 2  # the first length, then one dynamic graph for the others

    # a CUDA graph of the compiled step over static buffers, replayed with new contents
    static = arguments(128, 90)
    graph, static_out = captured(lambda: compiled(*static[:3], cache_k, cache_v, *static[3:], weight))
    for now in (95, 110, 127):
        for buffer, value in zip(static, arguments(128, now)):
            buffer.copy_(value)
        check(lambda: (graph.replay(), static_out)[1], static)


@pytest.mark.cuda
@needs_cuda
def test_gpu_fused_tiny_model_with_the_kernel_verifies(monkeypatch):
    """The whole path: fused mode's compiled layers calling the kernel, captured, verified against eager."""
    from tiny_models import tiny_decoder

    from accelerate_graph.core.backends import backend_for
    from accelerate_graph.core.capture import capture_decode_graphs
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused.layers import FusedForward
    from accelerate_graph.verify.against_eager import verify_graphs

    torch._dynamo.reset()
    traced = []
    original = kernel.launch
    monkeypatch.setattr(kernel, "launch", lambda *a, **k: traced.append(1) or original(*a, **k))
    model = tiny_decoder("llama", num_attention_heads=8, num_key_value_heads=2)
    grouped_attention.use_grouped_attention(model)
    session = DecodeSession(model.to("cuda", torch.bfloat16), 4, 64)
    with settings.use(settings.DEFAULTS.replace(triton_attention=True)):
        session.fused = FusedForward(session.model)
        graphs = capture_decode_graphs(session, backend_for(torch.device("cuda:0")), (1, 2, 4), contexts=(16, 32))
    assert traced, "the compiled layers never reached the kernel"
    rows = verify_graphs(graphs, steps=8, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert (session.fused.graphs, session.fused.recompiles) == (2, 0)
