"""The engine's prefill graphs (serve/prefill_graphs.py) under the CPU emulation: first prompt parts replay a
graph of their shape, later parts of a long prompt run eagerly, every request's tokens stay HF's for its prompt
alone; a graph that does not capture leaves the prefills eager with one warning."""

from __future__ import annotations

import pytest
import torch
from slot_script import engine_on_session, hf_alone, load

from accelerate_graph.common.errors import CaptureError
from accelerate_graph.core.backends import EmulatedBackend, backend_for
from accelerate_graph.models.loading import load_model
from accelerate_graph.serve import engine as engine_module
from accelerate_graph.serve.prefill_graphs import prefill_shapes


@pytest.mark.parametrize("chunk, max_rows, max_len", [(2048, 64, 1024), (2048, 48, 4096), (512, 8, 300), (64, 4, 64)])
def test_every_forward_the_engine_may_run_has_a_shape(chunk, max_rows, max_len):
    """rows x the longest part within the chunk, parts below the cache length: a shape holds it, within twice
    the chunk's tokens."""
    shapes = prefill_shapes(chunk, max_rows, max_len)
    assert all(rows * width <= 2 * chunk for rows, width in shapes)
    for rows in range(1, max_rows + 1):
        for width in range(1, min(chunk // rows, max_len - 1) + 1):
            assert any(r >= rows and w >= width for r, w in shapes), (rows, width)


def test_no_shape_below_the_smallest_width():
    assert prefill_shapes(16, 4, 64) == []


CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_first_parts_replay_graphs_and_a_long_prompts_rest_runs_eagerly(tiny_model_dir, device, fused):
    """A chunk of 32: a 40-token prompt's first 32 tokens and a 9-token prompt each by a replay, the long one's
    last 8 in an eager forward of its row alone; then the two decode, each HF's for its prompt alone (float32;
    on a GPU real CUDA graphs)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    model = load_model(tiny_model_dir("llama"), torch.device(device), torch.float32, "sdpa", None).model
    engine = engine_on_session(model, backend_for(torch.device(device), emulate=device == "cpu"), fused, chunk=64)
    eager = []
    row_forward = engine.session.row_forward
    engine.session.row_forward = lambda *args: eager.append(args[0]) or row_forward(*args)
    engine.chunk = 32  # after the capture: the shapes of a 64-token chunk, a 32-token chunk's forwards
    long, short = list(range(30, 70)), list(range(100, 109))
    rows = [engine.admit(long), engine.admit(short)]
    tokens = {}
    while pending := [r for r in rows if engine.next_chunk(r)]:
        for group in engine.prefill_groups(pending):
            logits = engine.prefill(group)
            tokens |= {r: [int(logits[i].argmax())] for i, r in enumerate(group) if engine.next_chunk(r) == 0}
    assert engine.prefill_graphs.replays == 2 and eager == [0]  # both first parts (32 + 9 > 32: two), the rest
    for _ in range(5):
        feed = torch.tensor([tokens[r][-1] for r in rows], device=device)
        for r, token in zip(rows, engine.decode(rows, feed).argmax(-1).tolist()):
            tokens[r].append(token)
    assert [tokens[r] for r in rows] == [hf_alone(model, long, 6), hf_alone(model, short, 6)]


def test_a_prefill_graph_that_does_not_capture_leaves_prefills_eager(tiny_model_dir, monkeypatch):
    def refuse(*args):
        raise CaptureError("CUDA graph capture failed: operation not permitted when stream is capturing")

    monkeypatch.setattr(engine_module, "PrefillGraphs", refuse)
    with pytest.warns(UserWarning, match=r"prefills run eagerly: their graphs did not capture \(CUDA graph"):
        engine = engine_on_session(load(tiny_model_dir("llama")), EmulatedBackend(), fused=False, chunk=64)
    assert engine.prefill_graphs is None
    row = engine.admit([5, 6, 7])
    assert engine.prefill([row]).shape == (1, engine.vocab_size)


def test_the_setting_off_keeps_prefills_eager(tiny_model_dir):
    engine = engine_on_session(
        load(tiny_model_dir("llama")), EmulatedBackend(), fused=False, chunk=64, prefill_graphs=False
    )
    assert engine.prefill_graphs is None
