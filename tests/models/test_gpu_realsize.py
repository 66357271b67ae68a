"""Real-size recipes on one GPU: capture plain and --fuse, verify, a short bench at buckets 1, 8, 32, and
every command's peak device memory within its stated bound.

Minutes per recipe and tens of GB of device memory, so they run only when asked:
  CUGRAPH_ACCEL_REALSIZE=1 PYTHONPATH=. python -m pytest -q -m cuda tests/models/test_gpu_realsize.py -k llama
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from accelerate_graph.bench.run import BenchSettings, release, run_bench
from accelerate_graph.core.memory import memory_record, peak_bytes
from accelerate_graph.pipeline import CaptureRequest, Hooks, prepare
from accelerate_graph.verify.against_eager import verify_graphs

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.realsize,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(os.environ.get("CUGRAPH_ACCEL_REALSIZE") != "1", reason="set CUGRAPH_ACCEL_REALSIZE=1"),
]
DENSE_AND_MOE = ["llama-3.1-8b", "olmoe-1b-7b", "phi-3-mini-4k", "gemma-2-2b"]
BUCKETS = (1, 8, 32)
LOAD_SECONDS = 60  # random initialisation on the device, in the target dtype


@pytest.fixture(autouse=True)
def _free_the_gpu():
    """Each test's model, cache and graphs go before the next test loads its own."""
    yield
    release(torch.device("cuda"))


def _prepare(recipe: str, **options):
    times = {}
    hooks = Hooks(
        stage=lambda text: times.setdefault("start", time.perf_counter()) if text.startswith("loading") else None
    )
    hooks.loaded = lambda loaded: times.setdefault("loaded", time.perf_counter())
    prepared = prepare(CaptureRequest(model=recipe, device="cuda", dtype="bf16", **options), hooks)
    assert times["loaded"] - times["start"] < LOAD_SECONDS, (
        f"{recipe} took {times['loaded'] - times['start']:.0f} s to load"
    )
    return prepared


def _within_bound(prepared, steps: int = 3) -> dict:
    record = memory_record(peak_bytes(prepared.session.device), prepared.memory_bound(steps))
    assert record["within_bound"], f"peak {record['peak_bytes'] / 2**30:.2f} GiB over {record['bound']}"
    return record


@pytest.mark.parametrize("recipe", DENSE_AND_MOE)
def test_capture_verify_within_memory(recipe):
    prepared = _prepare(recipe, buckets=BUCKETS)
    assert prepared.graphs is not None
    rows = verify_graphs(prepared.graphs, steps=8, prompt_len=prepared.plan.prompt_len)
    assert all(row.passed for row in rows), [row.detail for row in rows if not row.passed]
    _within_bound(prepared, steps=8)


@pytest.mark.parametrize("recipe", DENSE_AND_MOE)
def test_capture_fused_within_memory(recipe):
    prepared = _prepare(recipe, buckets=BUCKETS, fuse=True)
    _within_bound(prepared)


@pytest.mark.parametrize("recipe", DENSE_AND_MOE)
def test_short_bench_no_row_under_its_floor(recipe):
    settings = BenchSettings(compare=("eager", "graph", "fused"), steps=20, warmup=5)
    report = run_bench(CaptureRequest(model=recipe, device="cuda", dtype="bf16", buckets=BUCKETS), settings)
    assert {r.contender for r in report.rows} >= {"eager", "graph"}
    assert not [r for r in report.rows if r.under_floor], [r.record() for r in report.rows if r.under_floor]
    for info in report.contexts:
        assert info.memory["within_bound"], info.memory


def test_phi3_batch_32_at_cache_4096_fits_one_gpu():
    """`bench --compare graph,fused --buckets 1,8,32 --context 4096` fits a 141 GB H200: one cache and one
    decode session for every contender, not whole-cache snapshots (three more 51.5 GB caches)."""
    settings = BenchSettings(compare=("graph", "fused"), contexts=(4096,), steps=10, warmup=3)
    report = run_bench(CaptureRequest(model="phi-3-mini-4k", device="cuda", dtype="bf16", buckets=BUCKETS), settings)
    memory = report.contexts[0].memory
    assert memory["within_bound"], memory
    assert memory["peak_bytes"] < 51.6e9 + 7.7e9 + 12e9  # one cache, the weights and at most 12 GB more


def test_30b_captures_and_verifies_at_bucket_1():
    prepared = _prepare("qwen3-30b-a3b", buckets=(1,))
    rows = verify_graphs(prepared.graphs, steps=8, prompt_len=prepared.plan.prompt_len)
    assert all(row.passed for row in rows), [row.detail for row in rows if not row.passed]
    _within_bound(prepared, steps=8)
