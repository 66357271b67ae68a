"""Real CUDA graphs on the GPU (skipped without CUDA; run on a GPU machine)."""

import pytest
import torch

from accelerate_graph.compat.cuda_driver import node_carveouts
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.backends import cuda as cuda_backend
from accelerate_graph.core.backends.cuda import capture_stream, claim_capture_stream
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.against_eager import verify_graphs

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_cuda_graph_replay_matches_eager(tiny_model_dir, model_type, dtype):
    loaded = load_model(tiny_model_dir(model_type), GPU, dtype)
    session = DecodeSession(loaded.model, 8, 128)
    graphs = capture_decode_graphs(session, backend_for(GPU), (1, 2, 4, 8))
    rows = verify_graphs(graphs, steps=8, prompt_len=9)
    assert [(r.bucket, r.batch) for r in rows] == [(1, 1), (2, 2), (4, 4), (4, 3), (8, 8), (8, 5)]
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_emulation_agrees_with_cuda_graphs(tiny_model_dir, model_type):
    """The same step replayed by the emulation and by a real graph gives the same logits."""
    loaded = load_model(tiny_model_dir(model_type), GPU, torch.float32)
    session = DecodeSession(loaded.model, 2, 64)
    outputs = []
    for emulate in (False, True):
        graphs = capture_decode_graphs(session, backend_for(GPU, emulate=emulate), (2,))
        session.prefill(torch.arange(10, device=GPU).reshape(2, 5))
        steps = [
            graphs.run(torch.tensor([3, 4], device=GPU), torch.full((2,), 5 + i, device=GPU)).clone() for i in range(4)
        ]
        outputs.append(torch.stack(steps))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_qwen_shape_recipe_captures_and_verifies():
    prepared = prepare(CaptureRequest(model="qwen2.5-0.5b", buckets=(1, 8, 16, 32)))
    assert prepared.plan.mode == "full" and prepared.plan.backend == "cuda-graph"
    captures = {c.bucket: c for c in prepared.graphs.captures()}
    total = sum(c.memory_bytes for c in captures.values())
    assert total <= 1.5 * max(captures[32].memory_bytes, 1), "the shared pool should be reused by smaller buckets"
    rows = verify_graphs(prepared.graphs, steps=8, prompt_len=prepared.plan.prompt_len)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_cli_capture_verify_on_gpu(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    plan = tmp_path / "plan.yaml"
    runner = CliRunner()
    result = runner.invoke(app, ["capture", "tiny", "--plan", str(plan)])
    assert result.exit_code == 0, result.output
    assert "cuda" in result.output and "device: cuda" in plan.read_text()
    result = runner.invoke(app, ["verify", "--plan", str(plan)])
    assert result.exit_code == 0, result.output
    assert "verified" in result.output


def test_every_backend_of_a_device_captures_on_one_stream(tiny_model_dir):
    """A graph captured on another stream than the process's first side stream replays slower under PDL
    (docs/PERF.md): every backend of a device, and "cuda" and "cuda:0", take the same stream, and
    a second capture on it still replays what eager computes."""
    claim_capture_stream(GPU)  # what a --tp rank does first: a kernel on it, and idle after
    assert capture_stream(GPU).query()
    first, second = backend_for(GPU), backend_for(torch.device("cuda"))
    assert first.stream is second.stream is capture_stream(GPU)
    loaded = load_model(tiny_model_dir("llama"), GPU, torch.bfloat16)
    session = DecodeSession(loaded.model, 2, 64)
    capture_decode_graphs(session, first, (2,))
    rows = verify_graphs(capture_decode_graphs(session, second, (1, 2)), steps=4, prompt_len=5)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_graphs_above_batch_1_ask_for_one_shared_memory_split(tiny_model_dir, monkeypatch):
    """Every kernel node of a graph above batch 1 asks for carveout 100 (read back from the runtime), batch 1's
    keep the driver's, and the graphs still replay what eager computes (docs/PERF.md)."""
    asked: list[tuple[int, int]] = []
    real = cuda_backend.prefer_shared_memory

    def recorded(graph, percent):
        asked.append((graph, percent))
        return real(graph, percent)

    monkeypatch.setattr(cuda_backend, "prefer_shared_memory", recorded)
    loaded = load_model(tiny_model_dir("llama"), GPU, torch.bfloat16)
    session = DecodeSession(loaded.model, 4, 64)
    graphs = capture_decode_graphs(session, backend_for(GPU), (1, 2, 4))
    assert [percent for _, percent in asked] == [100, 100]  # buckets 4 and 2, none for batch 1
    for graph, _ in asked:
        read = node_carveouts(graph)
        assert read and all(value == 100 for value in read), read
    rows = verify_graphs(graphs, steps=4, prompt_len=5)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_a_capture_that_fails_midway_leaves_the_process_able_to_run_cuda():
    """A step that copies from unpinned host memory is refused inside the capture; the capture ends on its own
    stream, so the process runs CUDA work after it (a capture left open fails every later call), and the same
    backend captures again: in a fresh pool, since torch 2.11's pinned-host allocator asserts when a capture
    begins in the pool a failed graph released."""
    from accelerate_graph.common.errors import CaptureError

    backend = backend_for(GPU)
    x = torch.ones(4, device=GPU)

    def copies_from_the_host() -> torch.Tensor:
        return x + torch.ones(4).to(GPU)

    failed_pool = backend.pool
    with pytest.raises(CaptureError, match="Cannot copy between CPU and CUDA"):
        backend.capture(copies_from_the_host, warmups=1)
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.arange(3).to(GPU).sum().item() == 3
    assert backend.pool != failed_pool
    graph = backend.capture(lambda: x * 2, warmups=1)
    assert graph.replay().tolist() == [2.0] * 4
