"""Context buckets, grouped-query decode attention and fused (inductor) steps on real CUDA graphs."""

import pytest
import torch
from tiny_models import every_op_up_to, tiny_decoder

from accelerate_graph import settings
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.verify.against_eager import verify_graphs

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


def capture_and_verify(model, fused: bool, dtype=torch.bfloat16, **changes):
    """Captured and verified under the default settings with `changes` (settings names)."""
    session = DecodeSession(model.to(GPU, dtype), 4, 64)
    with settings.use(settings.DEFAULTS.replace(**changes)):
        if fused:
            torch._dynamo.reset()  # compilations of earlier tests share HF's code objects: count only ours
            session.fused = FusedForward(session.model, positions=session.kv.storage_len)  # as capture builds it
            assert session.fused.rotary, "the rotary table is what --fuse runs"
        graphs = capture_decode_graphs(session, backend_for(GPU), (1, 2, 4), contexts=(16, 32))
        rows = verify_graphs(graphs, steps=8, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    return session, graphs


@pytest.mark.parametrize("attn", ["sdpa", "grouped"])
def test_context_buckets_on_gpu(attn):
    model = tiny_decoder("qwen2")
    if attn == "grouped":
        use_grouped_attention(model)
    capture_and_verify(model, fused=False)


def test_fused_layers_compile_once_per_batch_class_and_replay_like_eager(tmp_path, monkeypatch):
    # an inductor cache of its own: a hit on an entry another test compiled brings that entry's shape
    # guards along, which can fail at batch 4 and count as a recompile of ours
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    model = tiny_decoder("llama")
    use_grouped_attention(model)  # what --fuse runs
    session, graphs = capture_and_verify(model, fused=True)
    assert (session.fused.graphs, session.fused.recompiles) == (2, 0)  # batch 1; batches 2 and 4
    assert len(graphs.graphs) == 9 and session.fused.compile_seconds > 0


def test_the_final_norm_kernel_replays_and_verifies():
    """The final norm kernel (fused/final_norm.py, on by default): its Triton launch recorded in the graph."""
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session, _ = capture_and_verify(model, fused=True, final_norm_kernel=True)
    assert session.fused.final_norm


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_lm_head_kernel_replays_and_verifies(model_type, monkeypatch):
    """The LM head on the skinny kernels at batch 1 (fused/lm_head.py, setting lm_head_kernel on; auto takes
    the measured head shapes):
    its PDL launch recorded in the graph, the logits within verify's bound of eager's."""
    from accelerate_graph.fused import lm_head

    heads = []  # the output widths of the skinny op's calls from the head (batch 1's warm-ups and capture)
    original = lm_head.norm_projections
    monkeypatch.setattr(lm_head, "norm_projections", lambda x, *a: heads.append(a[3][0].shape[0]) or original(x, *a))
    model = tiny_decoder(model_type)
    use_grouped_attention(model)
    session, _ = capture_and_verify(model, fused=True, lm_head_kernel="on")
    assert session.fused.lm_head and heads and set(heads) == {model.config.vocab_size}


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_mask_kernel_replays_and_verifies(model_type):
    """The one-kernel decode mask (fused/causal_mask.py, setting mask_kernel on): its Triton launch recorded
    in the graph, every decode step's mask built by it."""
    model = tiny_decoder(model_type)
    use_grouped_attention(model)
    session, _ = capture_and_verify(model, fused=True, mask_kernel=True)
    assert session.fused.causal_mask.built > 0 and session.fused.causal_mask.fell_back == 0


def test_mistral_without_a_window_takes_the_layer_program_on_its_kernels():
    """Mistral without a sliding window is the Llama layer: the merged program with the skinny kernels at
    every batch verifies. (Their eps reached them as fp64 from inductor's launcher and failed to compile
    above batch 1 on the H200 until it was cast to fp32.)"""
    model = tiny_decoder("mistral")
    model.config.sliding_window = None
    use_grouped_attention(model)
    session, _ = capture_and_verify(model, fused=True, skinny_batch_1="on", skinny_batches="on")
    assert session.fused.programmed


@pytest.mark.parametrize("skinny", ["none", "batch-1", "every-batch", "residual-above-1"])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_merged_projections_verify_on_gpu(model_type, skinny):
    """The merged layer program (q/k/v and gate/up one projection each): inductor compiles it, the graphs
    replay it, and verify judges it like any other fused step; at batch 1 with inductor's GEMVs or the
    skinny kernels (the default for the shapes of their table; this model's are not there), and with the skinny
    kernels at batches 2 and 4 too (setting skinny_batches, one dynamic graph for both), or only o and down
    there (q/k/v and gate/up on cuBLAS)."""
    from accelerate_graph.fused.layer_program import MERGED_QKV

    at_one = "off" if skinny == "none" else "on"
    above = {"every-batch": "on", "residual-above-1": "residual"}.get(skinny, "off")
    model = tiny_decoder(model_type)
    use_grouped_attention(model)
    session, _ = capture_and_verify(model, fused=True, skinny_batch_1=at_one, skinny_batches=above)
    assert session.fused.programmed and getattr(model.model.layers[0].self_attn, MERGED_QKV) is not None


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_row_limit_splits_the_batches_above_1_in_two_graphs(model_type, monkeypatch):
    """The default above batch 1 (SKINNY_WINS_ABOVE_BATCH_1): each op on the skinny kernels up to the rows a
    step measured faster, on cuBLAS past them. Every op up to 2 rows here: batch 2 on the skinny kernels,
    batch 4 on cuBLAS, each in its own compiled graph (a guard on the rows, not a recompile), both verified."""
    from accelerate_graph.fused import layer_program
    from accelerate_graph.fused.kernels import skinny_matmul

    rows = []
    launch = skinny_matmul.launch
    monkeypatch.setattr(
        skinny_matmul, "launch", lambda op, x, *a, **k: rows.append(x.shape[0]) or launch(op, x, *a, **k)
    )
    model = tiny_decoder(model_type)
    monkeypatch.setattr(layer_program, "SKINNY_WINS_ABOVE_BATCH_1", every_op_up_to(model.config, 2))
    use_grouped_attention(model)
    chosen = {"skinny_batch_1": "off", "skinny_batches": "auto"}
    session, _ = capture_and_verify(model, fused=True, **chosen)
    assert (session.fused.graphs, session.fused.recompiles) == (3, 0)  # batch 1; batch 2; batch 4
    with settings.use(settings.DEFAULTS.replace(**chosen)):
        assert "every op up to 2 rows" in session.fused.layer_forward_kind()
    concrete = {int(r) for r in rows if isinstance(r, int)}  # the opaque (PDL) op sees real rows
    assert 4 not in concrete and (2 in concrete or not session.fused.pdl)


def test_compile_contender_after_a_fused_capture_compiles_whole():
    """bench times torch.compile after `fused` on the same session: the fused compilation's dynamic-size
    marks must not reach the tensors compile sees (they cost it graph breaks and 20 ms steps once)."""
    from accelerate_graph.bench.compiled_step import compile_step, mark_step_begin

    torch._dynamo.reset()
    model = tiny_decoder("llama").to(GPU, torch.bfloat16)
    session = DecodeSession(model, 4, 64)
    undo = use_grouped_attention(model)
    session.fused = FusedForward(model, positions=session.kv.storage_len)
    capture_decode_graphs(session, backend_for(GPU), (1, 4), contexts=(16,))
    undo()
    session.prefill(torch.randint(0, 200, (4, 5), device=GPU))

    def before() -> None:
        session.kv.rewind(5)
        mark_step_begin()

    compiled = compile_step(session, 4, before)
    assert compiled.graphs == 1 and compiled.cudagraph_skips == 0


def test_plain_graphs_still_verify_after_a_fused_capture_on_their_session():
    """Fusing merges q/k/v and gate/up into new tensors; the plan's plain graphs recorded the old ones and
    replayed NaN once that memory was reused. The prepared graphs keep them alive: both verify."""
    from accelerate_graph.pipeline import CaptureRequest, capture_fused, prepare

    torch._dynamo.reset()
    prepared = prepare(CaptureRequest(model="tiny", buckets=(1, 2), max_cache_len=64, device="cuda"))
    weights = [(p.shape, p.dtype) for p in prepared.session.model.parameters()]
    fused = capture_fused(prepared, CaptureRequest())
    # blocks the size of the old weights, from the allocator's cache: what freed weights' memory would hold
    poison = [torch.full(shape, float("nan"), device=GPU, dtype=dtype) for shape, dtype in weights * 2]
    for graphs in (prepared.graphs, fused):
        rows = verify_graphs(graphs, steps=8, prompt_len=6)
        assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert all(t.isnan().all() for t in poison)  # held to the end
