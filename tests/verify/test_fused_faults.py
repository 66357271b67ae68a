"""Faults under `--fuse`: the fused step (the layer program over merged projections, the rotary table, the
grouped attention) captured as the CLI captures it, each fault planted in its replay path only. Every kind
that applies is caught where the plain capture catches it, the harmless one passes having run, and a fault
whose code the fused step never runs says so instead of passing for nothing. CPU emulation here (dynamo runs
the layers uncompiled under it: tests/fused/test_contexts_and_fuse.py); the cuda test records the
inductor-compiled step, whose one compiled function per layer class runs no hook added inside a layer."""

import pytest
import torch
from fault_harness import BUCKETS, CONTEXTS, every, failed, fp8_session, tiny_session, verify_with

from accelerate_graph.compat.torch_internals import has_call_hooks
from accelerate_graph.verify import faults
from accelerate_graph.verify.cases import VERIFY, Case, Coverage, graphs_replayed
from accelerate_graph.verify.faults import COVERAGE_SIZED, cache_noise_fault, fault

BF16 = torch.bfloat16
ALL_CONTEXTS = (*CONTEXTS, 32)
# what the layer program multiplies by without calling the module (o and down run as modules when hooked)
UNCALLED = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")


def _key(r):
    return (r.bucket, r.batch, r.context, r.slots)


@pytest.mark.parametrize(
    "kind, size",
    [
        ("frozen_position", None),
        ("skipped_write", None),  # layer 1, the last: a layer other than the first of its compiled class
        ("wrong_slot", None),
        ("skipped_layer", None),
        ("drift", None),
        ("close_flip", 0.2),
        ("rotary_skew", None),  # on the rotary table that stands in for the module
        ("nan_top_logit", None),
        ("inf_top_logit", None),
        ("nan_cache", None),
    ],
)
def test_a_fault_in_every_fused_graph_fails_every_case(kind, size):
    rows = verify_with(tiny_session("llama"), fault(kind, size), fuse=True)
    assert rows and failed(rows) == every(rows), [r.detail for r in rows if r.passed]


def test_a_fused_cache_three_times_further_from_float32_than_eagers_fails():
    session = tiny_session("llama", BF16)
    rows = verify_with(session, cache_noise_fault(session, 3.0, 1), fuse=True)
    assert failed(rows) == every(rows)
    assert all("cache layer 1 row" in r.detail for r in rows), [r.detail for r in rows]


def test_a_padded_row_leaking_into_real_fused_rows_fails_the_padded_cases_only():
    rows = verify_with(tiny_session("llama"), fault("padded_leak"), fuse=True)
    assert any(r.batch < r.bucket for r in rows)
    assert failed(rows) == {_key(r) for r in rows if r.batch < r.bucket}


def test_stale_fused_graphs_fail_the_cases_that_replay_them():
    rows = verify_with(tiny_session("llama"), fault("wrong_bucket"), fuse=True)
    assert failed(rows) == {_key(r) for r in rows if r.bucket == BUCKETS[-1]}
    rows = verify_with(tiny_session("llama"), fault("wrong_context"), fuse=True)  # CPU only: see test_faults.py
    reach = {_key(r) for r in rows if int(r.slots.split("-")[1]) >= ALL_CONTEXTS[-2]}
    assert reach and failed(rows) == reach


def test_a_fault_in_one_fused_graph_is_caught_by_the_cases_that_replay_it():
    graph = (BUCKETS[0], ALL_CONTEXTS[-1])
    rows = verify_with(tiny_session("llama"), fault("frozen_position"), only=graph, fuse=True)
    expected = set()
    for r in rows:
        start, end = map(int, r.slots.split("-"))
        if graph in graphs_replayed(Case(r.bucket, r.batch, r.context, start, end - start + 1), BUCKETS, ALL_CONTEXTS):
            expected.add(_key(r))
    assert expected and failed(rows) == expected


@pytest.mark.parametrize("kind", ["ignored_mask", "shared_position"])
def test_a_fused_replay_blind_to_left_padding_fails_the_ragged_cases(kind):
    rows = verify_with(tiny_session("llama"), fault(kind), coverage=Coverage(ragged=VERIFY.ragged), fuse=True)
    ragged = {_key(r) for r in rows if r.padding}
    assert ragged and failed(rows) == ragged, [(r.slots, r.padding, r.detail) for r in rows]


def test_a_fused_fault_from_slot_32_on_fails_the_cases_that_reach_it():
    rows = verify_with(
        tiny_session("llama", cache=64), fault("late_slot"), coverage=Coverage(positions=VERIFY.positions), fuse=True
    )
    reach = {_key(r) for r in rows if int(r.slots.split("-")[1]) >= COVERAGE_SIZED["late_slot"]}
    assert reach and failed(rows) == reach


def test_a_fused_fault_from_the_41st_replay_on_is_caught():
    rows = verify_with(tiny_session("llama"), fault("late_replay"), coverage=Coverage(soak=VERIFY.soak), fuse=True)
    assert failed(rows), [r.detail for r in rows]


def test_garbled_padding_rows_of_a_fused_step_pass_having_run():
    """Its hook ran in every recorded step (capture_with_fault checks that), and verify passes it."""
    rows = verify_with(
        tiny_session("llama"), fault("padding_rows_only"), coverage=Coverage(ragged=VERIFY.ragged), fuse=True
    )
    assert any(r.batch < r.bucket for r in rows)
    assert rows and not failed(rows), [(r.slots, r.padding, r.detail) for r in rows if not r.passed]


def _hooked_modules(session, kind: str) -> set[str]:
    """The names of the modules a recording fault of `kind` hooks in `session`'s model."""
    undos = faults._RECORDING_FAULTS[kind](session, fault(kind))
    try:
        return {name for name, module in session.model.named_modules() if has_call_hooks(module)}
    finally:
        for undo in undos:
            undo()


def test_rounding_noise_under_fuse_runs_in_full_or_is_refused():
    """Where its hooks sit on projections the layer program never calls, the fused capture refuses it, naming
    one; hooked elsewhere it runs in every recorded step and passes (float32)."""
    session = tiny_session("llama")
    uncalled = {name for name in _hooked_modules(session, "rounding_noise") if name.endswith(UNCALLED)}
    if uncalled:
        with pytest.raises(ValueError, match=r"^rounding_noise never ran in the recorded step .*self_attn\.q_proj"):
            verify_with(session, fault("rounding_noise"), fuse=True)
    else:
        rows = verify_with(session, fault("rounding_noise"), fuse=True)
        assert rows and not failed(rows), [r.detail for r in rows if not r.passed]


def _hook_on(path: str):
    """A recording fault (for the fault table) that scales `path`'s output: the kind of hook a fault on a
    projection would plant."""

    def plant(session, planted):
        module = session.model.get_submodule(path)
        return [module.register_forward_hook(lambda module, args, output: output * 2).remove]

    return plant


def test_a_fault_the_fused_layer_program_never_calls_is_refused(monkeypatch):
    monkeypatch.setitem(faults._RECORDING_FAULTS, "drift", _hook_on("model.layers.1.self_attn.q_proj"))
    session = tiny_session("llama")
    with pytest.raises(ValueError, match=r"^drift never ran .*model\.layers\.1\.self_attn\.q_proj .*--fuse"):
        verify_with(session, fault("drift"), fuse=True)
    assert session.fused is None and not has_call_hooks(session.model.model.layers[1].self_attn.q_proj)
    rows = verify_with(session, fault("drift"))  # the plain step calls q_proj: caught
    assert failed(rows) == every(rows)


def test_a_fault_on_a_module_the_step_never_calls_is_refused(monkeypatch):
    session = tiny_session("llama")
    session.model.add_module("unused", torch.nn.Linear(2, 2))
    monkeypatch.setitem(faults._RECORDING_FAULTS, "drift", _hook_on("unused"))
    with pytest.raises(
        ValueError, match=r"^drift never ran .*bucket 4, context 32: its hooks on unused .*does not call"
    ):
        verify_with(session, fault("drift"))


def test_a_lasting_fault_that_never_runs_is_refused(monkeypatch):
    def plant(session, planted):
        return _hook_on("model.layers.0.mlp.up_proj")(session, planted)[0]

    monkeypatch.setitem(faults._LASTING_FAULTS, "padded_leak", plant)
    with pytest.raises(ValueError, match=r"^padded_leak never ran .*model\.layers\.0\.mlp\.up_proj"):
        verify_with(tiny_session("llama"), fault("padded_leak"), fuse=True)


@pytest.mark.parametrize("scheme", ["fp8", "fp8-block"])
def test_a_wrong_scale_under_fuse_fails_every_case(scheme):
    """The layer program reads the down projection's scale itself: the swap around its decoder layer reaches it."""
    rows = verify_with(fp8_session(scheme), fault("wrong_scale"), fuse=True)
    assert rows and failed(rows) == every(rows), [r.detail for r in rows if r.passed]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_faults_in_the_compiled_fused_step_on_the_gpu_are_caught(monkeypatch):
    """Inductor compiles one function per layer class, shared by both layers, before any fault (the clean
    capture first): faults on layer 1 and the FP8 scale swap still reach the recorded graphs, and a hook
    inside a layer is refused, not passed."""
    session = tiny_session("llama", BF16, "cuda")
    rows = verify_with(session, None, fuse=True)
    assert rows and not failed(rows), [r.detail for r in rows if not r.passed]
    for planted in (fault("skipped_write", layer=1), cache_noise_fault(session, 3.0, 1), fault("drift", 0.04)):
        rows = verify_with(session, planted, fuse=True)
        assert failed(rows) == every(rows), (planted.describe(), [r.detail for r in rows if r.passed])
    # dynamo does not guard on module hooks: one on down_proj added after the layer compiled never runs (refused);
    # had a compilation traced it in, the fault would be caught. In one graph only: a retrace costs seconds
    monkeypatch.setitem(faults._RECORDING_FAULTS, "drift", _hook_on("model.layers.1.mlp.down_proj"))
    try:
        rows = verify_with(session, fault("drift"), only=(BUCKETS[0], ALL_CONTEXTS[-1]), fuse=True)
    except ValueError as err:
        assert str(err).startswith("drift never ran") and "model.layers.1.mlp.down_proj" in str(err), err
    else:
        assert failed(rows), "a hook inside a compiled layer ran, yet no case failed"
    monkeypatch.undo()
    session = fp8_session("fp8", "cuda")
    assert not failed(verify_with(session, None, fuse=True))
    rows = verify_with(session, fault("wrong_scale", layer=1), fuse=True)
    assert failed(rows) == every(rows), [r.detail for r in rows if r.passed]
