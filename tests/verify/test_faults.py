"""Detection must not weaken: each fault planted in the replay path only fails verify, in the cases it
touches; the correct graphs pass (float32 and bf16, dense and MoE). CPU emulation here, the same on CUDA."""

import pytest
import torch
from fault_harness import BUCKETS, CONTEXTS, every, failed, tiny_session, verify_with

from accelerate_graph.verify.cases import Case, graphs_replayed
from accelerate_graph.verify.faults import fault

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)
DEVICES = ["cpu", CUDA]
ALL_CONTEXTS = (*CONTEXTS, 32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kind", ["frozen_position", "skipped_write", "wrong_slot", "skipped_layer", "drift", "close_flip"]
)
def test_a_fault_in_every_graph_fails_every_case(kind, device):
    rows = verify_with(tiny_session(device=device), fault(kind, size={"close_flip": 0.2}.get(kind)))
    assert failed(rows) == every(rows), [r.detail for r in rows if r.passed]
    cache_faults = ("skipped_write", "wrong_slot")
    assert all(("cache layer 1" in r.detail) == (kind in cache_faults) or "logits" in r.detail for r in rows)


@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_row_leaking_into_real_rows_fails_the_padded_cases_only(device):
    rows = verify_with(tiny_session(device=device), fault("padded_leak"))
    assert failed(rows) == {(r.bucket, r.batch, r.context, r.slots) for r in rows if r.batch < r.bucket}
    assert any(r.batch < r.bucket for r in rows)


@pytest.mark.parametrize("device", DEVICES)
def test_a_stale_graph_of_a_smaller_bucket_fails_that_bucket(device):
    rows = verify_with(tiny_session(device=device), fault("wrong_bucket"))
    assert failed(rows) == {(r.bucket, r.batch, r.context, r.slots) for r in rows if r.bucket == BUCKETS[-1]}


def test_a_stale_graph_of_a_shorter_context_fails_the_cases_that_reach_it():
    """CPU only: on a GPU the out-of-bounds cache write is a device-side assert that ends the process."""
    rows = verify_with(tiny_session(), fault("wrong_context"))
    reach = {
        (r.bucket, r.batch, r.context, r.slots)
        for r in rows
        if int(r.slots.split("-")[1]) >= ALL_CONTEXTS[-2]  # a step writes in the last context bucket
    }
    assert reach and failed(rows) == reach
    assert all("the step raised" in r.detail for r in rows if not r.passed)


@pytest.mark.parametrize("graph", [(b, c) for b in BUCKETS for c in ALL_CONTEXTS])
def test_a_fault_in_one_graph_is_caught_by_the_cases_that_replay_it(graph):
    """Coverage: a frozen value planted in one (batch bucket, context bucket) graph only."""
    rows = verify_with(tiny_session(), fault("frozen_position"), only=graph)
    expected = set()
    for r in rows:
        start, end = map(int, r.slots.split("-"))
        case = Case(r.bucket, r.batch, r.context, start, end - start + 1)
        if graph in graphs_replayed(case, BUCKETS, ALL_CONTEXTS):
            expected.add((r.bucket, r.batch, r.context, r.slots))
    assert expected and failed(rows) == expected


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2", "qwen2_moe", "olmoe"])
def test_correct_graphs_pass(model_type, dtype, device):
    if device == "cuda" and "moe" in model_type:
        # On the H200 (2026-11-30) the tiny MoE's experts copied host data during capture although detection
        # found no hazard, and a failed capture left the stream unusable for the tests after it. MoE on the
        # GPU is proved through the pipeline (piecewise where needed): tests/detect/test_gpu_regions.py and
        # the real-size OLMoE and Qwen3-30B verify runs. This whole-step harness cannot take islands.
        pytest.skip("tiny MoE needs eager islands on CUDA; verified through the pipeline elsewhere")
    rows = verify_with(tiny_session(model_type, dtype, device), None)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind, size", [("drift", 0.04), ("close_flip", 0.04)])
def test_small_faults_in_bf16_are_caught(kind, size, device):
    """The issue's bf16 misses under the old rtol rule: every logit x1.04, greedy tokens flipped where the
    top-2 gap is under 4%. Caught since the float32-reference criterion (verify/criterion.py)."""
    rows = verify_with(tiny_session(dtype=torch.bfloat16, device=device), fault(kind, size))
    assert failed(rows) == every(rows)
