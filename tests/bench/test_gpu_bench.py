"""The bench contenders on a real GPU (skipped without CUDA; run on a GPU machine)."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.bench.compiled_step import compile_step, forget_compiled, mark_step_begin
from accelerate_graph.bench.environment import sm_clock_mhz
from accelerate_graph.bench.floor import measure_bandwidth
from accelerate_graph.bench.run import BenchSettings, run_bench
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.pipeline import CaptureRequest

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


def test_bandwidth_and_clock():
    bandwidth = measure_bandwidth(GPU)
    assert 1e11 < bandwidth.bytes_per_s < 2e13, bandwidth  # 100 GB/s .. 20 TB/s
    clock = sm_clock_mhz(GPU)
    assert clock == "unknown" or 100 < clock < 5000


def test_compiled_step_matches_eager_and_keeps_its_cuda_graphs(tiny_model_dir):
    """The compile contender must run reduce-overhead for real (no cudagraph skip because of the cache
    views it mutates) and compute the same step as eager."""
    model = load_model(tiny_model_dir("llama"), GPU, torch.float32).model
    session = DecodeSession(model, 4, 64)
    prompt_len, bucket = 9, 2
    session.prefill(torch.arange(bucket * prompt_len, device=GPU).reshape(bucket, prompt_len) % 200)
    start = session.kv.snapshot(4)
    session.load_inputs(bucket, torch.tensor([5, 7], device=GPU), torch.full((bucket,), prompt_len, device=GPU))
    with torch.no_grad():
        expected = session.step_fn(bucket)().float().clone()

    def before() -> None:
        session.kv.restore(start)
        mark_step_begin()

    compiled = compile_step(session, bucket, before)
    assert compiled.cudagraph_skips == 0 and compiled.seconds > 0
    before()
    with torch.no_grad():
        actual = compiled.call().float().clone()
    torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
    forget_compiled()


def test_every_contender_on_gpu(tiny_model_dir):
    settings = BenchSettings(compare=("eager", "graph", "compile", "hf-generate"), steps=10, warmup=2, new_tokens=8)
    report = run_bench(CaptureRequest(model=tiny_model_dir("llama"), buckets=(2,), device="cuda"), settings)
    assert report.environment["gpu"] != "none" and report.bandwidth.gb_per_s > 100
    got = {(r.kind, r.contender): r for r in report.rows}
    assert set(got) == {
        ("step", "eager"),
        ("step", "graph"),
        ("step", "compile"),
        ("generate", "hf-generate"),
        ("generate", "our-loop"),
    }
    assert all(r.median_ms > 0 for r in report.rows)  # speed itself is the benchmark's job, not a test's
    assert got[("generate", "hf-generate")].setup_seconds > 0 and got[("generate", "our-loop")].new_tokens == 8
    assert not [n for n in report.contexts[0].notes if "without CUDA graphs" in n], report.contexts[0].notes
