"""Failure containment: memory limits, capture failures, interrupts, replay safety (CPU emulation)."""

import pytest
import torch
import yaml
from hazard_modules import HostReadingNorm
from typer.testing import CliRunner

from accelerate_graph.common import debug
from accelerate_graph.common.errors import CaptureError, ReplaySafetyError, ResourceError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.static_cache import check_cache_fits, estimate_cache_bytes
from accelerate_graph.models.loading import load_model
from cli.errors import describe
from cli.main import app

CPU = torch.device("cpu")
runner = CliRunner()


@pytest.fixture
def session(tiny_model_dir):
    return DecodeSession(load_model(tiny_model_dir("llama"), CPU, torch.float32).model, 4, 64)


def test_max_memory_drops_buckets_that_do_not_fit(session):
    full = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4))
    sizes = {c.bucket: c.memory_bytes for c in full.captures()}
    cap = sizes[1] + sizes[2] + 1  # room for 2 and 1, not for 4
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), max_memory_bytes=cap)
    assert graphs.buckets == (1, 2) and graphs.dropped == [4]
    with pytest.raises(ResourceError, match="no bucket's graph fits"):
        capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), max_memory_bytes=1)


@pytest.mark.parametrize(
    "oom",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: out of memory"),
    ],
)  # outside / inside a capture
def test_capture_oom_frees_and_names_the_bucket(session, monkeypatch, oom):
    backend = EmulatedBackend()
    real = backend.capture

    def capture(step, warmups=2, islands=(), batch=0):
        if session.input_ids.shape[0] and capture.calls == 1:
            raise oom
        capture.calls += 1
        return real(step, warmups, islands, batch)

    capture.calls = 0
    monkeypatch.setattr(backend, "capture", capture)
    with pytest.raises(ResourceError, match=r"capturing bucket 2 \(\d+ MiB of graphs captured before it were freed\)"):
        capture_decode_graphs(session, backend, (1, 2, 4))


def test_capture_failure_names_module_and_operation(session):
    layer = session.model.model.layers[1]
    layer.post_attention_layernorm = HostReadingNorm(layer.post_attention_layernorm)
    with pytest.raises(CaptureError) as err:
        capture_decode_graphs(session, EmulatedBackend(), (1,))
    message = str(err.value)
    assert "bucket 1 failed in model.layers.1.post_attention_layernorm (HostReadingNorm)" in message
    assert ".item()" in message and "hazard_modules.py:" in message
    assert "mode='piecewise'" in message


def test_cache_that_cannot_fit_gets_the_number_it_needs(session, monkeypatch):
    config = session.model.config
    per_slot = estimate_cache_bytes(config, 1, 1, torch.float32)
    assert per_slot == 2 * 2 * 2 * 16 * 4  # K+V, 2 layers, 2 kv heads, head_dim 16, fp32
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (per_slot * 1000, per_slot * 2000))
    with pytest.raises(ResourceError, match=r"needs .* GiB; .* free\. Lower max_cache_len to at most 900 "):
        check_cache_fits(config, 1, 4096, torch.float32, torch.device("cuda"))
    check_cache_fits(config, 1, 800, torch.float32, torch.device("cuda"))  # fits: no error


def test_replay_copies_its_output_out(session):
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,))
    session.prefill(torch.randint(0, 256, (2, 4)))
    first = graphs.run(torch.tensor([1, 2]), torch.tensor([4, 4]))
    kept = first.clone()
    graphs.run(torch.tensor([3, 4]), torch.tensor([5, 5]))
    assert torch.equal(first, kept)  # the second replay did not overwrite what the caller holds
    view = graphs.run(torch.tensor([3, 4]), torch.tensor([5, 5]), copy=False)
    assert view.data_ptr() == graphs.graphs[2, session.max_cache_len].output.data_ptr()


def test_debug_checks_static_buffer_addresses(session):
    debug.set_debug(True)
    try:
        graphs = capture_decode_graphs(session, EmulatedBackend(), (2,))
        graphs.run(torch.tensor([1, 2]), torch.tensor([0, 0]))  # unchanged buffers pass
        layer = session.kv.layers[1]
        layer.keys = layer.keys.clone()  # what a cache re-allocation would do
        with pytest.raises(ReplaySafetyError, match="cache layer 1 keys buffer moved since capture"):
            graphs.run(torch.tensor([1, 2]), torch.tensor([0, 0]))
    finally:
        debug.set_debug(False)


def test_ctrl_c_during_capture_exits_130_and_writes_nothing(tmp_path, monkeypatch):
    import accelerate_graph.pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(accelerate_graph.pipeline, "prepare", interrupted)  # cli/ imports it when it runs
    plan = tmp_path / "p.yaml"
    result = runner.invoke(app, ["capture", "tiny", "--plan", str(plan)])
    assert result.exit_code == 130
    assert "interrupted" in result.stderr and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("CUDA error: device-side assert triggered", "device-side assert"),
        ("CUDA error: an illegal memory access was encountered", "illegal memory access"),
        ("CUDA out of memory. Tried to allocate 20.00 GiB", "ran out of memory"),
        ("operation not permitted when stream is capturing", "not allowed inside a CUDA graph capture"),
    ],
)
def test_raw_cuda_failures_become_one_clear_line(text, phrase):
    message, code = describe(RuntimeError(text))
    assert phrase in message and code == 1
    if "assert" in text or "illegal" in text:
        assert "process must end" in message


def test_cli_max_memory_lists_dropped_buckets(tmp_path):
    import json

    plan = tmp_path / "p.yaml"
    first = runner.invoke(app, ["capture", "tiny", "--device", "cpu", "--plan", str(plan), "--json", "-"])
    sizes = {c["bucket"]: c["memory_bytes"] for c in json.loads(first.stdout)["plan"]["captures"]}
    cap_mib = (sum(sizes.values()) - sizes[8] + 1) / 2**20  # everything but the largest bucket fits
    result = runner.invoke(
        app, ["capture", "tiny", "--device", "cpu", "--plan", str(plan), "--force", "--max-memory", f"{cap_mib:.6f}"]
    )
    assert result.exit_code == 0, result.output
    assert "--max-memory dropped bucket(s) 8" in " ".join(result.output.split())
    assert yaml.safe_load(plan.read_text())["buckets"] == [1, 2, 4]


def test_gpu_plan_on_a_machine_without_one_blames_the_plan(tmp_path, monkeypatch):
    plan = tmp_path / "p.yaml"
    assert runner.invoke(app, ["capture", "tiny", "--device", "cpu", "--plan", str(plan)]).exit_code == 0
    data = yaml.safe_load(plan.read_text())
    data["device"] = "cuda:0"
    plan.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["verify", "--plan", str(plan)])
    assert result.exit_code == 1
    assert "error: the plan targets cuda:0, which this machine cannot use" in result.stderr


def test_out_of_memory_while_loading_says_the_weights_do_not_fit(monkeypatch):
    import accelerate_graph.models.loading as loading

    def too_big(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(loading, "_load_recipe", too_big)
    with pytest.raises(ResourceError, match=r"out of memory loading tiny in float32 on cpu: its weights do not fit"):
        load_model("tiny", CPU, torch.float32)
