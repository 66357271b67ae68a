"""The floor counts what a step must read: for a mixture of experts, top_k routed experts per layer (a lower
bound whatever the routing), shared experts and routers whole; hand-computed for qwen2_moe, olmoe, mixtral."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from accelerate_graph.bench.floor import step_bytes
from accelerate_graph.bench.results import BenchRow, under_floor_notes
from accelerate_graph.bench.timing import Latency
from accelerate_graph.core.decode_session import DecodeSession

BASE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=256, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0,
)  # fmt: skip
MOE = {
    "qwen2_moe": dict(
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48
    ),
    "olmoe": dict(num_experts=8, num_experts_per_tok=2),
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
}
# Parameters, counted by hand (hidden 64, 4 query heads and 2 KV heads of 16, vocab 256, 2 layers):
# attention q 64x64, k 64x32, v 64x32, o 64x64 = 12288; two norms 128; router 8x64 = 512;
# the LM head 256x64 = 16384 and the final norm 64; the input embedding is a gather of `batch` rows of 64.
ATTENTION, NORMS, ROUTER, HEAD = 12288, 128, 512, 16384 + 64
HAND = {
    # + q/k/v biases 128, + a shared expert 3x48x64 = 9216 and its 1x64 gate; routed expert 3x64x32 = 6144
    "qwen2_moe": (2 * (ATTENTION + 128 + NORMS + ROUTER + 9216 + 64) + HEAD, 2 * 6144),
    # + q_norm over 64 and k_norm over 32; routed expert 3x64x128 = 24576 (intermediate_size is per expert)
    "olmoe": (2 * (ATTENTION + 64 + 32 + NORMS + ROUTER) + HEAD, 2 * 24576),
    "mixtral": (2 * (ATTENTION + NORMS + ROUTER) + HEAD, 2 * 24576),
}


def _session(model_type: str) -> DecodeSession:
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **BASE, **MOE[model_type])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    return DecodeSession(model, 8, 32)


@pytest.mark.parametrize("model_type", sorted(MOE))
def test_moe_floor_counts_top_k_experts_per_layer(model_type):
    session = _session(model_type)
    dense, expert = HAND[model_type]
    for batch, most in ((1, 2), (2, 4), (8, 8)):  # at most min(8 experts, batch x top 2)
        moved = step_bytes(session, batch, 10)
        assert moved.expert_bytes == expert * 4  # float32
        assert moved.experts_min == 2 and moved.experts_max == most
        assert moved.weights == (dense + 64 * batch + 2 * expert) * 4
        assert moved.weights_max == (dense + 64 * batch + most * expert) * 4
    everything = sum(p.nbytes for p in session.model.parameters())
    assert step_bytes(session, 1, 10).weights < everything  # the old floor's count: every expert


def test_dense_floor_unchanged():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **BASE)).eval()
    moved = step_bytes(DecodeSession(model, 2, 32), 1, 10)
    assert moved.experts_max == 0 and moved.expert_bytes == 0
    assert moved.weights == (2 * (ATTENTION + NORMS + 3 * 64 * 128) + HEAD + 64) * 4


def test_a_row_under_its_floor_is_flagged_loudly():
    fast = BenchRow.measured("step", 1024, 128, 1, "fused", Latency.of([2.009] * 5), floor_ms=3.215)
    slow = BenchRow.measured("step", 1024, 128, 1, "graph", Latency.of([4.0] * 5), floor_ms=3.215)
    assert fast.under_floor and fast.record()["under_floor"] is True
    assert not slow.under_floor and slow.record()["under_floor"] is False
    notes = under_floor_notes([fast, slow])
    assert len(notes) == 1 and "UNDER THE FLOOR" in notes[0] and "fused at batch 1" in notes[0]
