"""generate on a real GPU (skipped without CUDA; run on a GPU machine): float32 greedy equality
with HF generate() for the native loop and the drop-in, and the bf16 agreement rate, reported."""

from __future__ import annotations

import pytest
import torch
from test_equality_with_hf import NEW, PROMPTS, hf_greedy

from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.generate.dropin import accelerate
from accelerate_graph.generate.loop import NativeLoop
from accelerate_graph.models.loading import load_model

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


def _native(model, prompts):
    session = DecodeSession(model, 4, 64)
    graphs = capture_decode_graphs(session, backend_for(GPU), (1, 2, 4), contexts=(16, 32))
    rows = NativeLoop(graphs, pad_id=0).generate(prompts, NEW).rows
    assert graphs.eager_fallbacks == 0
    return [r.tokens for r in rows]


def _on_gpu(folder, dtype):
    return load_model(folder, GPU, dtype, "sdpa", None).model


def _hf(model, prompts):
    return hf_greedy(model, prompts[:4]) + hf_greedy(model, prompts[4:])


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_float32_greedy_equals_hf_on_the_gpu(tiny_model_dir, model_type):
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _on_gpu(tiny_model_dir(model_type), torch.float32)
    expected = _hf(model, PROMPTS)
    assert _native(model, PROMPTS) == expected
    with accelerate(model, buckets=(1, 4), max_cache_len=64, contexts=(16,)) as handle:
        assert hf_greedy(model, PROMPTS[:4]) == expected[:4]
    assert handle.counts.graph_steps == NEW - 1


def test_bf16_agreement_rate_with_hf_is_reported(tiny_model_dir, capsys):
    """bf16 replays and HF's eager steps may round differently; with clear logit margins (the LM head
    scaled up) greedy choices should still agree almost everywhere. The rate is printed for the record."""
    model = _on_gpu(tiny_model_dir("llama"), torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # wider margins between the top logits
    expected, got = _hf(model, PROMPTS), _native(model, PROMPTS)
    same = sum(a == b for want, mine in zip(expected, got) for a, b in zip(want, mine))
    total = sum(len(want) for want in expected)
    rate = same / total
    with capsys.disabled():
        print(f"\nbf16 greedy agreement with HF generate (tiny llama, LM head x8): {same}/{total} = {rate:.1%}")
    assert rate >= 0.9
