"""Piecewise capture, the sliding-window fix and MoE on real CUDA graphs (run on the device)."""

import pytest
import torch
from hazard_modules import ConstantScaledNorm, HostConstantNorm, HostReadingNorm
from tiny_models import tiny_decoder

from accelerate_graph.capture_flow import decide_regions
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.verify.against_eager import verify_graphs

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


def decide_capture_verify(model, buckets=(1, 2, 4), steps=10):
    session = DecodeSession(model, max(buckets), 64)
    decision = decide_regions(session, "auto", buckets[0])
    islands = [model.get_submodule(p) for p in decision.regions.islands]
    graphs = capture_decode_graphs(session, backend_for(GPU), buckets, islands=islands)
    rows = verify_graphs(graphs, steps=steps, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    return decision


def tiny(model_type, dtype=torch.bfloat16, **overrides):
    return tiny_decoder(model_type, **overrides).to(GPU, dtype)


def test_host_sync_islands_replay_on_gpu(tiny_model_dir):
    model = load_model(tiny_model_dir("llama"), GPU, torch.float32).model
    for layer in model.model.layers:
        layer.post_attention_layernorm = HostReadingNorm(layer.post_attention_layernorm)
    decision = decide_capture_verify(model)
    assert decision.regions.mode == "piecewise" and len(decision.regions.islands) == 2


def test_sliding_window_crossed_on_gpu():
    decision = decide_capture_verify(tiny("mistral", sliding_window=4), steps=12)
    assert decision.regions.mode == "full" and decision.fixes


def test_falcon_piecewise_on_gpu():
    model = tiny("falcon", num_kv_heads=2, new_decoder_architecture=True)
    decision = decide_capture_verify(model)
    assert decision.regions.mode in ("full", "piecewise")


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "olmoe", "qwen3_moe"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_moe_models_verify_on_gpu(model_type, dtype):
    model = tiny(model_type, dtype, num_local_experts=4, num_experts=4, num_experts_per_tok=2)
    grouped = model.get_experts_implementation()[""] == "grouped_mm"
    decision = decide_capture_verify(model)
    assert decision.regions.mode in ("full", "piecewise")
    if dtype == torch.float32 and grouped:  # grouped_mm's float32 fallback reads its offsets on the host
        assert any("batched_mm" in fix for fix in decision.fixes) and decision.regions.mode == "full", decision


def test_constants_built_or_moved_on_the_host_are_hoisted_on_gpu(tiny_model_dir):
    model = load_model(tiny_model_dir("llama"), GPU, torch.float32).model
    model.model.norm = ConstantScaledNorm(model.model.norm)
    for layer in model.model.layers:
        layer.post_attention_layernorm = HostConstantNorm(layer.post_attention_layernorm)
    decision = decide_capture_verify(model)
    assert decision.regions.mode == "full", decision.regions.reason
    assert any("made once outside the graph" in fix for fix in decision.fixes)
