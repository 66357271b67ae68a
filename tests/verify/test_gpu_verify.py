"""The criterion on real CUDA graphs in bf16 (skipped without CUDA; run on a GPU machine)."""

import copy

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.against_eager import verify_batch, verify_graphs
from accelerate_graph.verify.cases import VERIFY
from accelerate_graph.verify.reference import eager_step, float32_reference, reference_step

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")
BF16 = torch.bfloat16


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_bf16_graphs_pass_and_a_scaled_replay_fails(tiny_model_dir, model_type):
    loaded = load_model(tiny_model_dir(model_type), GPU, BF16)
    session = DecodeSession(loaded.model, 8, 128)
    graphs = capture_decode_graphs(session, backend_for(GPU), (1, 2, 8), contexts=(64,))
    rows = verify_graphs(graphs, steps=8, prompt_len=9, coverage=VERIFY)  # left-padded, spread, long runs
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert any(r.padding for r in rows)
    original = graphs.run
    graphs.run = lambda tokens, positions, copy=True: original(tokens, positions) * 1.04
    row = verify_batch(graphs, 8, 8, steps=8, prompt_len=9)
    assert not row.passed and "drifts" in row.detail, row


def test_fused_bf16_passes_both_gates(tmp_path):
    request = CaptureRequest(model="tiny", buckets=(1, 8), dtype="bf16", device="cuda", fuse=True)
    request.max_cache_len, request.inductor_cache = 256, str(tmp_path / "inductor")
    prepared = prepare(request)  # the check after capture: the same criterion
    rows = verify_graphs(prepared.graphs, steps=8, prompt_len=prepared.plan.prompt_len, coverage=VERIFY)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert any(r.padding for r in rows)  # the fused attention under a left-padded mask


def test_layerwise_reference_matches_a_float32_copy_on_the_gpu():
    model = tiny_decoder("llama").to(GPU, BF16)
    session = DecodeSession(model, 2, 32)
    float_session = DecodeSession(copy.deepcopy(model).float(), 2, 32)
    prompt = torch.randint(0, 256, (2, 5))
    session.prefill(prompt)
    float_session.prefill(prompt)
    tokens, positions = torch.tensor([1, 2], device=GPU), torch.full((2,), 5, device=GPU)
    with float32_reference(session):
        reference = reference_step(session, tokens, positions)
    truth = eager_step(float_session, tokens, positions)
    eager = eager_step(session, tokens, positions).float()
    # the prompt's K/V were written in bf16 by the bf16 prefill: the reference reads those, so it is
    # closer to the float32 copy than eager, not equal
    assert (reference - truth).norm() < (eager - truth).norm()


def test_tiny_moe_bf16_on_the_gpu_passes():
    model = tiny_decoder(
        "olmoe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32
    ).to(GPU, BF16)
    model.set_experts_implementation("batched_mm")  # no host reads in the experts: see detect/model_fixes.py
    session = DecodeSession(model, 8, 64)
    graphs = capture_decode_graphs(session, backend_for(GPU), (1, 8))
    rows = verify_graphs(graphs, steps=8, prompt_len=5)
    assert all(r.passed and r.has_routers for r in rows), [r.detail for r in rows if not r.passed]
