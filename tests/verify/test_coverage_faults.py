"""Faults that only what generate and serve do shows: left-padded rows, late slots, long runs. Each fails
verify on the CPU emulation under the part of cases.VERIFY that is meant to see it (VERIFY runs every
part: its cases include those, and its long runs come first), and passes the one case per graph of
cases.BASIC; a fault only in padding rows and another correct kernel's rounding pass the whole of VERIFY, and
each is shown to have changed the replay."""

import pytest
import torch
from fault_harness import BUCKETS, CACHE, CONTEXTS, PROMPT, failed, tiny_session, verify_with

from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.decode_session import DecodeSession, draw_inputs
from accelerate_graph.verify.cases import BASIC, VERIFY, Case, Coverage, graphs_replayed
from accelerate_graph.verify.faults import COVERAGE_SIZED, Fault, capture_with_fault, fault

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)


ALL_CONTEXTS = (*CONTEXTS, CACHE)
RAGGED = Coverage(ragged=VERIFY.ragged)
SPREAD = Coverage(positions=VERIFY.positions)
LONG = Coverage(soak=VERIFY.soak)


def _ragged(rows):
    return {(r.bucket, r.batch, r.context, r.slots) for r in rows if r.padding}


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("kind", ["ignored_mask", "shared_position"])
def test_a_replay_blind_to_left_padding_fails_the_ragged_cases(kind, device):
    rows = verify_with(tiny_session(device=device), fault(kind), coverage=RAGGED)
    assert _ragged(rows) and failed(rows) == _ragged(rows), [(r.slots, r.padding, r.detail) for r in rows]
    assert all(r.padding.startswith("0/") for r in rows if r.padding)  # row 0 keeps its whole prompt


def test_without_ragged_cases_the_padding_faults_pass():
    """What verify missed before: every row at one position, a mask of ones."""
    for kind in ("ignored_mask", "shared_position"):
        assert not failed(verify_with(tiny_session(), fault(kind), coverage=BASIC))


def test_a_fault_from_slot_32_on_fails_the_cases_that_reach_it():
    rows = verify_with(tiny_session(cache=64), fault("late_slot"), coverage=SPREAD)
    first = COVERAGE_SIZED["late_slot"]
    reach = {(r.bucket, r.batch, r.context, r.slots) for r in rows if int(r.slots.split("-")[1]) >= first}
    assert reach and failed(rows) == reach
    assert any(int(r.slots.split("-")[1]) == 63 for r in rows)  # the cache's last slot is replayed
    assert not failed(verify_with(tiny_session(cache=64), fault("late_slot"), coverage=BASIC))


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_a_fault_from_the_41st_replay_on_fails_in_every_graph(device):
    rows = verify_with(tiny_session(device=device), fault("late_replay"), coverage=LONG)
    # each graph's long run comes before the last case that replays it: that case fails, in every graph
    seen = set()
    for r in rows:
        if not r.passed:
            start, end = map(int, r.slots.split("-"))
            seen |= graphs_replayed(Case(r.bucket, r.batch, r.context, start, end - start + 1), BUCKETS, ALL_CONTEXTS)
    assert seen == {(b, c) for b in BUCKETS for c in ALL_CONTEXTS}
    assert not failed(verify_with(tiny_session(device=device), fault("late_replay"), coverage=BASIC))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["padding_rows_only", "rounding_noise"])
def test_what_no_request_sees_passes(kind, dtype):
    # bf16 without the long runs: they add nothing these faults depend on, and cost most of the time
    coverage = VERIFY if dtype == torch.float32 else Coverage(VERIFY.positions, VERIFY.ragged)
    rows = verify_with(tiny_session(dtype=dtype), fault(kind), coverage=coverage)
    assert rows and not failed(rows), [(r.slots, r.padding, r.detail) for r in rows if not r.passed]
    if kind == "padding_rows_only":
        assert any(r.batch < r.bucket for r in rows)
    else:
        assert_replay_moved(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_padding_fault_garbles_the_padding_rows_alone(dtype):
    assert_only_padding_garbled(*padded_replay(tiny_session(dtype=dtype), fault("padding_rows_only")))


def assert_replay_moved(rows) -> None:
    """A harmless fault that passes must have changed the replay: its logits differ from eager's somewhere
    (unfaulted, the replay repeats eager's own operations)."""
    assert max(r.max_abs for r in rows) > 0, "the replay's logits equal eager's everywhere: the fault did nothing"


def padded_replay(session: DecodeSession, planted: Fault, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One step of `batch` rows padded up to the largest bucket: the logits [bucket, V] of its replay with
    `planted` captured, and of the session's own eager step of the whole bucket from the same cache state
    with no fault; and `batch`."""
    bucket = BUCKETS[-1]
    prompt, tokens = draw_inputs(bucket, 1, PROMPT, session.vocab_size, 11)
    tokens = tokens[0, :batch].to(session.device)
    positions = torch.full((batch,), PROMPT, device=session.device)
    graphs, undo = capture_with_fault(session, backend_for(session.device), BUCKETS, planted, CONTEXTS)
    try:
        with torch.no_grad():
            session.prefill(prompt)
        start = session.kv.snapshot(bucket, PROMPT, 1)
        session.load_inputs(bucket, tokens, positions)
        replayed = graphs.replay_loaded(bucket).float().clone()
    finally:
        undo()
    session.kv.restore(start)
    session.load_inputs(bucket, tokens, positions)
    with torch.no_grad():
        plain = session.step_fn(bucket, CONTEXTS[0])().float()
    session.kv.reset()
    return replayed, plain, batch


def assert_only_padding_garbled(replayed: torch.Tensor, plain: torch.Tensor, batch: int) -> None:
    """Every padding row's logits far from the unfaulted step's (relative L2; the final norm takes out most of
    the x1000), every real row's as close as one rounding."""
    distance = ((replayed - plain).norm(dim=-1) / plain.norm(dim=-1)).tolist()
    assert max(distance[:batch]) <= 1e-2 and min(distance[batch:]) >= 0.2, distance


def test_the_check_after_capture_runs_a_left_padded_batch():
    """pipeline's quick check (verify_batch) prefills and decodes prompts of different lengths."""
    from accelerate_graph.core.backends import backend_for
    from accelerate_graph.verify.against_eager import verify_batch
    from accelerate_graph.verify.faults import capture_with_fault

    for kind, passes in ((None, True), ("ignored_mask", False), ("shared_position", False)):
        session = tiny_session()
        planted = fault(kind) if kind else None
        graphs, undo = capture_with_fault(session, backend_for(session.device), BUCKETS, planted, CONTEXTS)
        row = verify_batch(graphs, 4, 4, steps=3, prompt_len=8)
        undo()
        assert row.passed == passes and row.padding == "0/2/5/7", (kind, row.detail)
        assert bool(session.attention_mask.all())  # the mask buffer is all ones again
