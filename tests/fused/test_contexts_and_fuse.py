"""Context buckets, grouped-query decode attention and fused (inductor) mode, under the CPU emulation.

The emulation records the step's aten ops; compiled code runs no aten ops of its own, so under the
emulation's dispatch mode dynamo runs the step uncompiled: on the CPU these tests prove the plumbing
(one compilation for every graph, plan fields, refusals, kernels kept beside the plan), and the GPU
tests (tests/test_gpu_fused.py) prove the compiled step replays correctly.
"""

import pytest
import torch
from tiny_models import save_tiny_model, tiny_decoder, zoo_model
from typer.testing import CliRunner

from accelerate_graph.common.errors import DROP_FUSE, BadOptionError, CaptureError, ReplaySafetyError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.buckets import auto_contexts, context_for, parse_context_buckets, resolve_contexts
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.plan import read_plan
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward, inductor_cache_dir
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.reference import eager_step
from cli.main import app


def test_context_bucket_lists():
    assert auto_contexts(1024) == (256, 512, 1024)
    assert auto_contexts(4096) == (256, 512, 1024, 2048, 4096)
    assert auto_contexts(200) == (200,)
    assert parse_context_buckets("auto") is None and parse_context_buckets("full") == ()
    assert resolve_contexts((), 600) == (600,)
    assert resolve_contexts((64, 256, 4096), 600) == (64, 256, 600)
    with pytest.raises(BadOptionError, match=r"^contexts\b"):
        parse_context_buckets("64,x")
    assert context_for(0, (16, 32)) == 16 and context_for(15, (16, 32)) == 16
    assert context_for(16, (16, 32)) == 32 and context_for(32, (16, 32)) is None


def test_context_buckets_verify_across_every_boundary():
    session = DecodeSession(tiny_decoder("qwen2"), 4, 64)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), contexts=(16, 32))
    assert set(graphs.graphs) == {(b, c) for b in (1, 2, 4) for c in (16, 32, 64)}
    rows = verify_graphs(graphs, steps=8, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    # each graph from inside its context bucket, full and padded; then runs that move to the next graph
    assert {(r.bucket, r.batch, r.context, r.slots) for r in rows if r.bucket == 4} >= {
        (4, 4, 16, "6-13"),
        (4, 3, 32, "16-23"),
        (4, 4, 64, "32-39"),
        (4, 4, 16, "12-19"),
        (4, 4, 32, "28-35"),
    }
    assert len(rows) == 3 * 4 + 2 * 2


def test_a_context_graph_never_reads_slots_past_its_bucket():
    """NaN in slots 16 and later: the full-cache step reads them (NaN logits); the 16-slot graph must not."""
    session = DecodeSession(tiny_decoder("qwen2"), 2, 64)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=(16,))
    session.prefill(torch.randint(0, 256, (2, 6)))
    for layer in session.kv.layers:
        layer.keys[:, :, 16:] = float("nan")
        layer.values[:, :, 16:] = float("nan")
    start = session.kv.snapshot(2)
    tokens, positions = torch.tensor([1, 2]), torch.tensor([6, 6])
    assert graphs.context_now() == 16
    assert torch.isfinite(graphs.run(tokens, positions)).all()
    session.kv.restore(start)
    assert not torch.isfinite(eager_step(graphs.session, tokens, positions)).all()


def test_a_full_cache_is_refused_before_any_replay():
    session = DecodeSession(tiny_decoder("qwen2"), 2, 32)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=(16,))
    session.kv.rewind(32)
    with pytest.raises(ReplaySafetyError, match="the cache is full: the next token would go to slot 32 of 32"):
        graphs.run(torch.tensor([1, 2]), torch.tensor([32, 32]))


def test_debug_catches_a_write_slot_moved_behind_the_sessions_back():
    from accelerate_graph.common import debug

    session = DecodeSession(tiny_decoder("qwen2"), 2, 32)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=(16,))
    session.prefill(torch.randint(0, 256, (2, 4)))
    debug.set_debug(True)
    try:
        graphs.check_pointers = True
        session.kv.positions()[0].fill_(20)  # the device counter moved, the host's copy did not
        with pytest.raises(ReplaySafetyError, match="write slot is 20 on the device but 4 on the host"):
            graphs.run(torch.tensor([1, 2]), torch.tensor([4, 4]))
    finally:
        debug.set_debug(False)


def _prompt_and_three_steps(session: DecodeSession, prompt: torch.Tensor) -> torch.Tensor:
    """The logits of a 2-row prompt (9 tokens) and of three decode steps after it, on a fresh cache."""
    session.kv.reset()
    logits = [session.prefill(prompt)]
    for step in range(3):
        session.load_inputs(2, torch.tensor([3 + step, 7]), torch.full((2,), 9 + step))
        with torch.no_grad():
            logits.append(session.step_fn(2, 32)())
    return torch.stack(logits)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])  # multi-query, grouped, plain multi-head
def test_grouped_decode_attention_matches_sdpa(kv_heads):
    model = tiny_decoder("llama", num_key_value_heads=kv_heads)
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 256, (2, 9))
    expected = []
    for grouped in (False, True):
        if grouped:
            use_grouped_attention(model)
        expected.append(_prompt_and_three_steps(session, prompt))
    assert model.config._attn_implementation == "cugraph_grouped"
    torch.testing.assert_close(expected[1], expected[0], rtol=1e-4, atol=1e-5)


def test_fused_layers_compile_once_per_batch_class_and_leave_the_model_as_it_was():
    """Every layer runs one compiled forward: batch 1 is one compilation, every larger batch and every
    context bucket share a second; no recompilation, and the model is eager again after each call."""
    torch._dynamo.reset()  # compilations of earlier tests share HF's code objects: count only ours
    model = tiny_decoder("qwen2")
    use_grouped_attention(model)
    session = DecodeSession(model, 4, 64)
    fused = FusedForward(model, backend="aot_eager")
    cases = [(4, 32), (2, 16), (4, 64), (1, 16), (1, 64), (3, 32)]
    prompt = torch.randint(0, 256, (4, 6))
    got = session.first_steps(prompt, cases, fused)
    assert (fused.graphs, fused.recompiles) == (2, 0)
    assert all("forward" not in vars(module) for module in model.modules())
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1]
    expected = session.first_steps(prompt, cases)
    for (batch, context), a, b in zip(cases, got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"batch {batch} context {context}")


def test_fused_layers_under_inductor_match_eager():
    """The real compiler (inductor's CPU code) on the layers: the same logits as the eager step."""
    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    fused = FusedForward(model)
    cases = [(2, 32), (1, 32), (2, 64)]
    prompt = torch.randint(0, 256, (2, 6))
    got = session.first_steps(prompt, cases, fused)
    expected = session.first_steps(prompt, cases)
    assert fused.recompiles == 0
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_the_per_row_step_writes_the_cache_in_place_and_matches_eager():
    """Per-row mode (serve's graphs): each layer's write of the new K/V goes into the cache itself. Returning the
    layer's separate context views after writing through the row views made inductor clone every row's whole
    K and V, write into the clones and copy them back, every layer and step: some 0.2 ms a row at the 8B
    (a 30-row turn of `serve` at 11.8 ms against generate's 5.2, H200). Inductor's CPU code shows the same."""
    import re

    from accelerate_graph.compat.torch_internals import inductor_config_patched, inductor_generated_code

    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64, per_row=True)
    fused = FusedForward(model)
    cases = [(2, 32), (2, 64)]
    prompt = torch.randint(0, 256, (2, 6))
    with inductor_config_patched({"force_disable_caches": True}):  # the code is generated, not read from a cache
        got, code = inductor_generated_code(session.first_steps, prompt, cases, fused)
    storage = session.kv.storage_len
    allocated = [m.group(0) for source in code for m in re.finditer(r"empty_strided\w*\(\(([^)]*)\)", source)]
    whole_rows = [shape for shape in allocated if re.search(rf"\b{storage}\b", shape)]
    assert code and not whole_rows, whole_rows  # no buffer of a row's every slot
    assert fused.recompiles == 0
    for a, b in zip(got, session.first_steps(prompt, cases)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_fused_capture_verifies_across_batches_and_contexts():
    torch._dynamo.reset()
    session = DecodeSession(tiny_decoder("qwen2"), 4, 64)
    session.fused = FusedForward(session.model, backend="aot_eager")
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), contexts=(16, 32))
    assert len(graphs.graphs) == 9 and session.fused.recompiles == 0
    rows = verify_graphs(graphs, steps=6, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_fuse_refuses_a_model_without_its_list_of_layers():
    model = tiny_decoder("qwen2")
    model.config.num_hidden_layers = 5  # no module list of 5 layers
    with pytest.raises(CaptureError, match="has no list of 5 layers"):
        FusedForward(model)


def test_fuse_is_refused_for_a_step_with_eager_islands(tmp_path):
    # MPT's attention reads a host value in every step (an island; falcon's was, up to transformers 5.24)
    request = CaptureRequest(
        model=save_tiny_model("mpt", tmp_path / "mpt"), buckets=(1, 2), fuse=True, max_cache_len=32
    )
    with pytest.raises(
        CaptureError,
        match="fuse captures the whole step as one graph around its compiled layers, but this plan is piecewise",
    ):
        prepare(request)


def test_cli_fuse_writes_its_kernels_beside_the_plan_and_verify_reuses_them(tmp_path):
    plan = tmp_path / "fused.plan.yaml"
    runner = CliRunner()
    torch.compiler.reset()  # an earlier test compiled the same layer program: dynamo would reuse it
    args = ["--buckets", "1,2", "--max-cache-len", "96", "--context-buckets", "32", "--attn", "grouped"]
    result = runner.invoke(app, ["capture", *args, "--fuse", "--plan", str(plan)])
    assert result.exit_code == 0, result.output
    assert "inductor compiled the step in" in result.output
    saved = read_plan(plan)
    assert saved.fuse and saved.contexts == [32, 96] and saved.attn == "grouped"
    assert {c["context"] for c in saved.captures} == {32, 96}
    kernels = inductor_cache_dir(plan)
    assert kernels == tmp_path / "fused.plan.inductor" and any(kernels.iterdir())
    result = runner.invoke(app, ["verify", "--plan", str(plan)])
    assert result.exit_code == 0, result.output
    assert "as close to the reference (float32: the model itself) as eager execution" in " ".join(result.output.split())


def test_bench_fused_contender_uses_grouped_attention_and_leaves_the_plan_step_alone():
    from accelerate_graph.pipeline import capture_fused

    torch._dynamo.reset()
    prepared = prepare(CaptureRequest(model="tiny", buckets=(1, 2), max_cache_len=64, device="cpu"))
    original = prepared.session.model.model.layers[0].self_attn.q_proj.weight
    fused = capture_fused(prepared, CaptureRequest())
    assert prepared.session.fused.recompiles == 0 and fused.buckets == (1, 2)
    # the merged projections are new tensors; the plan's graphs recorded the old ones: they hold them
    assert original is not prepared.session.model.model.layers[0].self_attn.q_proj.weight
    assert any(kept is original for kept in prepared.graphs.retained)
    assert prepared.session.model.config._attn_implementation == "sdpa"  # eager, graph and compile keep it
    # the size marks of the fused compilation stay off the session's own tensors: the compile contender
    # compiles those with static shapes (marks left on them cost it graph breaks, seen on the H200)
    session = prepared.session
    views = [t for b in (1, 2) for layer in session.kv.view(b).layers for t in (layer.keys, layer.values)]
    for tensor in [*views, session.input_ids, session.position_ids, session.attention_mask]:
        assert not getattr(tensor, "_dynamo_unbacked_indices", None)
        assert not getattr(tensor, "_dynamo_weak_dynamic_indices", None)
    rows = verify_graphs(fused, steps=4, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_verify_compares_grouped_attention_against_hfs_own_sdpa():
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=(16,))
    seen = []
    original = session.step_fn

    def spying_step_fn(batch, context=None):
        seen.append(model.config._attn_implementation)
        return original(batch, context)

    session.step_fn = spying_step_fn
    session.prefill(torch.randint(0, 256, (2, 6)))
    eager_step(graphs.session, torch.tensor([1, 2]), torch.tensor([6, 6]))
    assert seen == ["sdpa"] and model.config._attn_implementation == "cugraph_grouped"
    rows = verify_graphs(graphs, steps=6, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_batch_1_lowers_projections_with_and_without_a_bias_to_gemv_reductions():
    """Traced with inductor's decompositions on a non-CPU device (meta): a one-row linear with a bias
    (Qwen2's q/k/v) becomes a multiply-and-sum, like one without; a larger batch keeps its matmul,
    and leaving the context restores inductor's own table."""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    from accelerate_graph.fused.gemv_lowering import gemv_at_batch_1

    aten = torch.ops.aten

    def traced_ops(rows: int, enabled: bool, bias: bool = True) -> set:
        weight = torch.empty(8, 4, device="meta", dtype=torch.bfloat16)
        x = torch.empty(rows, 8, device="meta", dtype=torch.bfloat16)
        args = (torch.empty(4, device="meta", dtype=torch.bfloat16), x, weight) if bias else (x, weight)
        with gemv_at_batch_1(enabled):
            graph = make_fx(torch.addmm if bias else torch.mm, decomposition_table=select_decomp_table())(*args)
        return {node.target for node in graph.graph.nodes if node.op == "call_function"}

    for bias in (True, False):
        gemv = traced_ops(1, True, bias)
        assert aten.sum.dim_IntList in gemv and not {aten.addmm.default, aten.mm.default} & gemv, bias
        assert aten.sum.dim_IntList not in traced_ops(4, True, bias)
    assert aten.sum.dim_IntList not in traced_ops(1, False)
    assert aten.sum.dim_IntList not in traced_ops(1, False, bias=False)


def test_batch_1_lowering_keys_inductor_caches_and_keeps_a_users_pass():
    """Inductor's cache keys do not see decomposition tables: the lowering adds a graph pass whose uuid
    they do see (and runs a pass the user had set, keyed with it); all is restored after."""
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from accelerate_graph.fused.gemv_lowering import gemv_at_batch_1

    class Users(CustomGraphPass):
        calls = 0

        def __call__(self, graph):
            Users.calls += 1

        def uuid(self):
            return "users"

    with gemv_at_batch_1(False):
        assert inductor_config.post_grad_custom_post_pass is None
    with gemv_at_batch_1(True):
        alone = inductor_config.post_grad_custom_post_pass.uuid()
    assert alone and inductor_config.post_grad_custom_post_pass is None
    users = Users()
    with inductor_config.patch(post_grad_custom_post_pass=users):
        with gemv_at_batch_1(True):
            tag = inductor_config.post_grad_custom_post_pass
            tag(torch.fx.Graph())
            assert tag.uuid() != alone and "users" in tag.uuid()
        assert inductor_config.post_grad_custom_post_pass is users
    assert Users.calls == 1


@pytest.mark.parametrize("model_type", ["gpt2", "gpt_neox", "gpt_neo", "gemma3"])
def test_fused_layers_match_eager_across_architectures(model_type):
    """GPT-2's and GPT-NeoX's blocks take the cache by position (a missed cache once sent every layer's
    K/V to layer 0: wrong logits); GPT-Neo's attention names its slot `layer_id`; Gemma 3's vision tower
    has a list of layers as long as its text model's. Each layer must get its own one-layer cache."""
    torch._dynamo.reset()
    model = zoo_model(model_type)
    if model.config._attn_implementation == "sdpa":
        use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    fused = FusedForward(model, backend="aot_eager")
    cases = [(2, 32), (1, 64)]
    prompt = torch.randint(0, 100, (2, 6))
    got = session.first_steps(prompt, cases, fused)
    expected = session.first_steps(prompt, cases)
    assert fused.graphs >= 2 and fused.recompiles == 0
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fused_layers_refuse_a_layer_called_without_the_cache():
    model = tiny_decoder("llama")
    fused = FusedForward(model, backend="aot_eager")
    layer = model.model.layers[0]
    with pytest.raises(CaptureError, match="layer 0 .* was called with 0 caches"):
        fused._layer_forward(layer, 0, 2)(torch.zeros(2, 1, 64))


def test_a_failed_fused_capture_says_to_drop_fuse(monkeypatch):
    session = DecodeSession(tiny_decoder("llama"), 2, 32)
    session.fused = FusedForward(session.model, backend="aot_eager")

    def failing(self, **kwargs):
        raise RuntimeError("LoweringException: an op inductor could not lower")

    monkeypatch.setattr(FusedForward, "__call__", failing)  # the hint comes from the fused forward itself
    with pytest.raises(CaptureError) as caught:
        capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=(16,))
    assert "capturing bucket 2 failed" in caught.value.message and "LoweringException" in caught.value.message
    assert caught.value.hint == DROP_FUSE


def test_a_fused_capture_that_disagrees_with_eager_is_refused(monkeypatch):
    """The quick check after capture also runs the smallest bucket under --fuse (batch 1 is its own
    compilation), and a disagreement names --fuse as what to drop."""
    from accelerate_graph.common.errors import VerificationError

    original = FusedForward.__call__

    def off_at_batch_1(self, **kwargs):
        out = original(self, **kwargs)
        if kwargs["input_ids"].shape[0] == 1:
            out.logits = out.logits + 1.0
        return out

    monkeypatch.setattr(FusedForward, "__call__", off_at_batch_1)
    torch._dynamo.reset()
    with pytest.raises(VerificationError) as caught:
        prepare(CaptureRequest(model="tiny", buckets=(1, 2), fuse=True, max_cache_len=64, device="cpu"))
    assert "bucket 1, fused" in caught.value.message and caught.value.hint == DROP_FUSE


def test_fused_layers_refuse_a_model_whose_layers_share_their_cache():
    """Dory's layers read other layers' K/V (and offset their cache index): no one-layer view serves them."""
    torch._dynamo.reset()
    model = zoo_model("dory")
    session = DecodeSession(model, 2, 64)
    with pytest.raises(CaptureError, match="addressed another layer's slot"):
        session.first_steps(torch.randint(0, 100, (2, 6)), [(2, 32)], FusedForward(model, backend="aot_eager"))


def test_compile_workers_start_with_the_plans_cache_folder(tmp_path, monkeypatch):
    """The workers inherit the environment when they start: the plan's cache folder is set first."""
    import os

    from accelerate_graph.fused import layers as fused_step

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))  # restored after the test
    fused_step.warm_compile_workers(torch.device("cpu"), tmp_path / "my.plan.inductor")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "my.plan.inductor").resolve())
    assert (tmp_path / "my.plan.inductor").is_dir()


def test_batch_1_lowers_every_projection_long_reductions_too():
    """Batch 1's GEMV lowering takes the 8B's down_proj (K > N, 58.7M elements) like q_proj (K <= N): with
    its input stored first the GEMV is as fast as cuBLAS (gemv_lowering.py)."""
    from accelerate_graph.fused import gemv_lowering

    row = torch.empty(1, 14336, device="meta")  # a GPU-like device: the lowering's test skips the CPU
    down = torch.empty(14336, 4096, device="meta")
    assert gemv_lowering.mm_as_reduction(row, down).shape == (1, 4096)
    wide = torch.empty(4096, 14336, device="meta")
    assert gemv_lowering.mm_as_reduction(torch.empty(1, 4096, device="meta"), wide).shape == (1, 14336)


def test_grouped_attention_stands_in_for_eager_in_a_softcapping_model_for_prompts_and_decode(monkeypatch):
    """A model that softcaps attention logits is loaded with eager attention (sdpa ignores the softcap):
    grouped attention replaces eager there, and its prompt steps too keep the softcap (never sdpa), over
    a sliding window the prompt and the decode steps cross. `hf_attention` switches back to eager."""
    from transformers import AutoModelForCausalLM

    from accelerate_graph.compat.transformers_internals import attention_implementations
    from accelerate_graph.fused import grouped_attention
    from accelerate_graph.fused.grouped_attention import GROUPED, hf_attention, stands_in_for
    from accelerate_graph.zoo.configs import tiny_config

    config = tiny_config("gemma2")
    config.attn_logit_softcapping = 0.5
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    assert stands_in_for(model) == "eager" and stands_in_for(tiny_decoder("llama")) == "sdpa"
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 256, (2, 9))  # longer than the window (4)
    expected = []
    for grouped in (False, True):
        if grouped:
            use_grouped_attention(model)
            monkeypatch.setattr(grouped_attention, "sdpa_attention_forward", None)  # would drop the softcap
        expected.append(_prompt_and_three_steps(session, prompt))
    assert attention_implementations(model) == {"": GROUPED}
    with hf_attention(model):
        assert attention_implementations(model) == {"": "eager"}
    torch.testing.assert_close(expected[1], expected[0], rtol=1e-4, atol=1e-5)


def test_a_softcapping_model_captures_with_grouped_attention_and_verifies_against_eager(tmp_path):
    """`--attn grouped` on a softcapping model (loaded with eager): the plan says grouped, the graphs replay
    our attention with the softcap, and verify's bf16 run passes against eager's float32 reference; an
    explicit `--attn eager` stays eager."""
    from transformers import AutoModelForCausalLM

    from accelerate_graph.zoo.configs import tiny_config

    config = tiny_config("gemma2")
    config.attn_logit_softcapping = 0.5
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "gemma2")
    runner = CliRunner()
    for attn, expected in (("grouped", "grouped"), ("eager", "eager")):
        plan = tmp_path / f"{attn}.plan.yaml"
        args = [str(tmp_path / "gemma2"), "--buckets", "1,2", "--max-cache-len", "32", "--dtype", "bfloat16"]
        result = runner.invoke(app, ["capture", *args, "--attn", attn, "--plan", str(plan)])
        assert result.exit_code == 0, result.output
        assert read_plan(plan).attn == expected
    result = runner.invoke(app, ["verify", "--plan", str(tmp_path / "grouped.plan.yaml")])
    assert result.exit_code == 0, result.output


def test_grouped_attentions_matmul_path_applies_the_softcap_as_hfs_eager_does():
    """Without the Triton kernel (CPU), grouped attention's matmul path computes softcap * tanh(s / softcap)
    as transformers' eager attention does; sdpa, which has no softcap, would not."""
    from types import SimpleNamespace

    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from accelerate_graph.fused.grouped_attention import grouped_decode_attention

    torch.manual_seed(0)
    query, key, value = torch.randn(2, 4, 1, 8) * 4, torch.randn(2, 2, 10, 8) * 4, torch.randn(2, 2, 10, 8)
    module = SimpleNamespace(training=False, num_key_value_groups=2)
    ours, _ = grouped_decode_attention(module, query, key, value, None, scaling=0.5, softcap=1.5)
    theirs, _ = eager_attention_forward(module, query, key, value, None, dropout=0.0, scaling=0.5, softcap=1.5)
    torch.testing.assert_close(ours, theirs)
    uncapped, _ = grouped_decode_attention(module, query, key, value, None, scaling=0.5)
    assert not torch.allclose(ours, uncapped, atol=1e-3)
