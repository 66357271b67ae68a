"""Capture + verify under the CPU emulation of CUDA graphs, through the real loading path."""

import pytest
import torch

from accelerate_graph.common.errors import CaptureError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.reference import eager_step

CPU = torch.device("cpu")


def session_for(tiny_model_dir, model_type, max_batch=4, cache_len=64):
    loaded = load_model(tiny_model_dir(model_type), CPU, torch.float32)
    return DecodeSession(loaded.model, max_batch, cache_len)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_replay_matches_eager_for_every_bucket_and_padding(tiny_model_dir, model_type):
    session = session_for(tiny_model_dir, model_type)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4))
    rows = verify_graphs(graphs, steps=8, prompt_len=5)
    assert [(r.bucket, r.batch) for r in rows] == [(1, 1), (2, 2), (4, 4), (4, 3)]
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert all(r.steps == 8 for r in rows)


def test_replay_advances_cache_position_like_a_graph(tiny_model_dir):
    session = session_for(tiny_model_dir, "llama")
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,))
    assert all(int(p) == 0 for p in session.kv.positions())  # capture leaves a clean cache
    session.prefill(torch.randint(0, 256, (2, 5)))
    for step in range(3):
        graphs.run(torch.tensor([1, 2]), torch.tensor([5 + step, 5 + step]))
    assert all(int(p) == 8 for p in session.kv.positions())


def test_baked_in_python_value_passes_eager_but_fails_verify(tiny_model_dir):
    """A step that adds a Python counter to its logits: eager sees it change, a replay sees it frozen."""
    session = session_for(tiny_model_dir, "llama")
    calls = {"n": 0}

    def add_call_count(module, args, output):
        calls["n"] += 1
        return output + calls["n"]

    session.model.lm_head.register_forward_hook(add_call_count)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2))
    first = eager_step(graphs.session, torch.tensor([3]), torch.tensor([0])).clone()
    second = eager_step(graphs.session, torch.tensor([3]), torch.tensor([0])).clone()
    assert not torch.equal(first, second)  # eager really re-runs the Python
    rows = verify_graphs(graphs, steps=4, prompt_len=3)
    assert rows and not any(r.passed for r in rows)
    assert "logits of row 0 at step 1" in rows[0].detail


def test_host_sync_in_the_step_is_refused_with_its_location(tiny_model_dir):
    session = session_for(tiny_model_dir, "llama")

    def read_on_host(module, args, output):
        return output * float(output.abs().max().item() > -1)

    session.model.lm_head.register_forward_hook(read_on_host)
    with pytest.raises(CaptureError, match=r"\.item\(\).*test_emulation.py:\d+"):
        capture_decode_graphs(session, EmulatedBackend(), (1,))


def test_batch_above_largest_bucket_runs_eagerly_and_is_counted(tiny_model_dir):
    session = session_for(tiny_model_dir, "llama", max_batch=6)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4))
    session.prefill(torch.randint(0, 256, (6, 4)))
    with pytest.warns(UserWarning, match="larger than the largest captured bucket 4"):
        logits = graphs.run(torch.arange(6), torch.full((6,), 4))
    graphs.run(torch.arange(6), torch.full((6,), 5))
    assert logits.shape == (6, 256)
    assert graphs.eager_fallbacks == 2


def test_padding_rows_leave_real_rows_untouched(tiny_model_dir):
    session = session_for(tiny_model_dir, "qwen2")
    graphs = capture_decode_graphs(session, EmulatedBackend(), (4,))
    session.prefill(torch.randint(0, 256, (4, 6)))
    before = session.kv.snapshot(4)
    graphs.run(torch.tensor([7]), torch.tensor([6]))  # batch 1 padded to 4
    after = session.kv.snapshot(4)
    for (k0, _v0, _), (k1, _v1, _) in zip(before, after):
        assert torch.equal(k0[0, :, :6], k1[0, :, :6])  # the real row's history is intact
        assert not torch.equal(k0[0, :, 6], k1[0, :, 6])  # and its new slot was written
