"""The native loop reads the device only every `check_every` steps (never per token), captures greedy
choice as graphs, and captures step graphs lazily, each before its first replay, keeping the cache."""

from __future__ import annotations

import pytest
import torch
from test_equality_with_hf import PROMPTS, hf_greedy, load

from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import DecodeGraphs, capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.host_reads import HostReadMode
from accelerate_graph.generate.loop import NativeLoop
from accelerate_graph.generate.sampling import Sampling


def _host_reads(loop: NativeLoop, prompts, new_tokens: int) -> int:
    reads: list[str] = []
    with HostReadMode(reads.append):
        loop.generate(prompts, new_tokens)
    return len(reads)


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_k=20, seed=3)])
def test_host_reads_do_not_grow_with_the_tokens_between_checks(tiny_model_dir, monkeypatch, sampling):
    """With check_every above the new tokens, 8 and 40 new tokens read the device equally often; with
    check_every 4, 40 tokens read at most once per check more. --debug's buffer check: once per chunk."""
    model = load(tiny_model_dir("llama"))
    graphs = capture_decode_graphs(DecodeSession(model, 4, 64), EmulatedBackend(), (4,), contexts=())
    checks = []
    monkeypatch.setattr(DecodeGraphs, "check_static_buffers", lambda self: checks.append(1))
    graphs.check_pointers = True
    prompts = PROMPTS[:4]
    loop = NativeLoop(graphs, sampling, eos_ids=[1], pad_id=0, check_every=64)
    _host_reads(loop, prompts, 8)  # first call: captures the choice graph (greedy)
    few, many = _host_reads(loop, prompts, 8), _host_reads(loop, prompts, 40)
    assert few == many and few <= 6  # first token, end of chunk (tokens, finished), the prefill's mask
    checking = NativeLoop(graphs, sampling, eos_ids=[1], pad_id=0, check_every=4)
    assert _host_reads(checking, prompts, 40) <= many + 2 * (40 // 4)
    assert len(checks) == 4  # one per chunk (4 calls of one chunk)


def test_greedy_choice_is_one_captured_graph_per_step_graph(tiny_model_dir, monkeypatch):
    model = load(tiny_model_dir("qwen2"))
    graphs = capture_decode_graphs(DecodeSession(model, 4, 64), EmulatedBackend(), (2, 4), contexts=(16,))
    captured = []
    original = EmulatedBackend.capture
    monkeypatch.setattr(EmulatedBackend, "capture", lambda self, *a, **k: captured.append(1) or original(self, *a, **k))
    loop = NativeLoop(graphs, pad_id=0)
    first = loop.generate(PROMPTS[:3], 20)  # slots 7..25: contexts 16 and 64 of bucket 4
    again = loop.generate(PROMPTS[:3], 20)
    assert len(captured) == 2  # kept for the second call
    assert [r.tokens for r in first.rows] == [r.tokens for r in again.rows] == hf_greedy(model, PROMPTS[:3], 20)


def test_lazy_capture_takes_only_the_graphs_a_request_uses_and_keeps_the_cache(tiny_model_dir):
    model = load(tiny_model_dir("gpt2"))
    session = DecodeSession(model, 4, 64)
    seen = []
    graphs = capture_decode_graphs(
        session, EmulatedBackend(), (1, 2, 4), contexts=(16, 32), lazy=True, on_captured=seen.append
    )
    assert graphs.graphs == {} and len(graphs.pending) == 9 and graphs.buckets == (1, 2, 4)
    result = NativeLoop(graphs, pad_id=0).generate(PROMPTS, 12)  # slots 7..17, then 1..11
    assert [r.tokens for r in result.rows] == hf_greedy(model, PROMPTS[:4], 12) + hf_greedy(model, PROMPTS[4:], 12)
    # each captured mid-generation (crossing into context 32) without disturbing the rows decoding
    assert [(c.bucket, c.context) for c in seen] == [(4, 16), (4, 32), (1, 16)]
    assert set(graphs.graphs) == {(4, 16), (4, 32), (1, 16)} and len(graphs.pending) == 6


def test_replay_of_a_graph_never_captured_is_refused():
    from tiny_models import tiny_decoder

    from accelerate_graph.common.errors import ReplaySafetyError

    session = DecodeSession(tiny_decoder("llama"), 2, 32)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=())
    with pytest.raises(ReplaySafetyError, match="no graph was captured for bucket 1"):
        graphs.graph_now(1)
    assert torch.isfinite(graphs.run(torch.tensor([1, 2]), torch.tensor([0, 0]))).all()
