"""Hazard detection, region plans and piecewise capture under the CPU emulation."""

import importlib

import pytest
import torch
from hazard_modules import ConstantScaledNorm, CountingHead, HostReadingNorm
from tiny_models import FALCON_INDEXES_WITH_LISTS, SMALL_DECODER, tiny_decoder
from transformers import AutoConfig, AutoModelForCausalLM

from accelerate_graph.capture_flow import decide_regions
from accelerate_graph.common.errors import CaptureError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.detect.hazards import find_hazards
from accelerate_graph.models.loading import load_model
from accelerate_graph.verify.against_eager import verify_graphs

CPU = torch.device("cpu")


def llama_session(tiny_model_dir, max_batch=4):
    loaded = load_model(tiny_model_dir("llama"), CPU, torch.float32)
    return DecodeSession(loaded.model, max_batch, 64)


def capture_and_verify(session, decision, buckets=(1, 2, 4), steps=8):
    islands = [session.model.get_submodule(p) for p in decision.regions.islands]
    graphs = capture_decode_graphs(session, EmulatedBackend(), buckets, islands=islands)
    return verify_graphs(graphs, steps=steps, prompt_len=6)


def test_clean_model_is_one_graph(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    assert find_hazards(session, 2) == []
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "full" and decision.regions.islands == []


def test_python_counter_is_found_in_its_module_and_isolated(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.lm_head = CountingHead(session.model.lm_head)
    hazards = find_hazards(session, 2)
    assert [(h.kind, h.module_path, h.module_class) for h in hazards] == [("python-value", "lm_head", "CountingHead")]
    assert "hazard_modules.py" in hazards[0].location
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "piecewise" and decision.regions.islands == ["lm_head"]
    islands = [session.model.lm_head]
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1,), islands=islands)
    before = session.model.lm_head.calls
    graphs.run(torch.tensor([1]), torch.tensor([0]))
    assert session.model.lm_head.calls == before + 1  # the island's Python runs on every replay


def test_host_sync_becomes_an_eager_island_per_layer(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    for layer in session.model.model.layers:
        layer.post_attention_layernorm = HostReadingNorm(layer.post_attention_layernorm)
    hazards = find_hazards(session, 2)
    assert {h.kind for h in hazards} == {"host-sync"}
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.islands == [
        "model.layers.0.post_attention_layernorm",
        "model.layers.1.post_attention_layernorm",
    ]
    assert decision.regions.regions[1]["reason"].startswith("host-sync at ")
    rows = capture_and_verify(session, decision)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_constant_host_data_is_hoisted_and_the_step_stays_whole(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.model.norm = ConstantScaledNorm(session.model.model.norm)
    assert [h.kind for h in find_hazards(session, 2)] == ["host-data"]
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "full" and decision.hazards == []
    assert any("constant Python data at " in fix and "hazard_modules.py" in fix for fix in decision.fixes)
    rows = capture_and_verify(session, decision)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_host_data_that_changes_each_step_stays_an_island(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.model.norm = ConstantScaledNorm(session.model.model.norm, varying=True)
    decision = decide_regions(session, "auto", 1)
    assert session.host_constants is None  # the fix removed nothing, so it was undone
    assert decision.regions.mode == "piecewise" and decision.regions.islands == ["model.norm"]


def test_a_hoisted_constant_the_model_wrote_into_is_built_again():
    from accelerate_graph.core.host_constants import HostConstants

    constants = HostConstants()

    def build():
        with constants:
            return torch.tensor([1.0, 2.0])

    first = build()
    assert build() is first
    first.add_(1)  # a model that writes into its "constant": it must not be handed out again
    second = build()
    assert second is not first and second.tolist() == [1.0, 2.0]
    with constants:
        assert torch.tensor(torch.ones(2)) is not torch.tensor(torch.ones(2))  # tensor data is never cached


def test_a_moved_cpu_constant_is_served_until_its_content_changes():
    from accelerate_graph.core.host_constants import HostConstants

    constants = HostConstants()

    def move(source):
        with constants:
            return source.to("meta")  # another device: a copy every call without the cache

    first = move(torch.arange(4.0))
    assert move(torch.arange(4.0)) is first
    assert move(torch.arange(4.0) + 1) is not first  # same line and shape, other values
    with constants:
        assert torch.arange(4.0).to(torch.float64).dtype == torch.float64  # CPU to CPU: nothing cached


def test_mode_full_refuses_an_unsafe_step_with_the_reason(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.lm_head = CountingHead(session.model.lm_head)
    with pytest.raises(CaptureError, match="mode='full' refused: python-value in lm_head"):
        decide_regions(session, "full", 1)


def test_hazard_in_the_decoder_stack_runs_eagerly(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.model.norm = HostReadingNorm(session.model.model.norm)
    original = session.model.model.forward

    def forward_with_host_read(*args, **kwargs):
        kwargs["position_ids"].max().item()  # a host read in the decoder stack itself
        return original(*args, **kwargs)

    session.model.model.forward = forward_with_host_read
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "eager"
    assert "holds most of the model" in decision.regions.reason
    with pytest.raises(CaptureError, match="mode='piecewise' refused"):
        decide_regions(session, "piecewise", 1)


def test_sliding_window_layers_are_replaced_and_verify_past_the_window():
    torch.manual_seed(0)
    config = AutoConfig.for_model("mistral", **SMALL_DECODER, sliding_window=4)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    session = DecodeSession(model, 4, 64)
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "full"
    assert any("sliding-window" in fix for fix in decision.fixes)
    rows = capture_and_verify(session, decision, steps=10)  # prompt 6 + 10 steps: well past a window of 4
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_falcon_index_list_is_an_island():
    """Each attention an island while transformers' Falcon indexes with lists (up to 5.24); one graph after."""
    model = tiny_decoder("falcon", num_kv_heads=2, new_decoder_architecture=True)
    session = DecodeSession(model, 4, 64)
    decision = decide_regions(session, "auto", 1)
    if FALCON_INDEXES_WITH_LISTS:
        assert decision.regions.mode == "piecewise"
        assert decision.regions.islands == ["transformer.h.0.self_attention", "transformer.h.1.self_attention"]
    else:
        assert (decision.regions.mode, decision.regions.islands) == ("full", [])
    rows = capture_and_verify(session, decision)
    assert all(r.passed for r in rows)


def test_locations_point_at_modeling_code_even_under_a_folder_named_torch():
    from accelerate_graph.common.source_location import is_internal, short

    assert is_internal(torch.__file__)
    assert is_internal(importlib.import_module("accelerate_graph.detect.hazards").__file__)
    # the GPU machine's transformers lives in /opt/torch/.venv: that is modeling code, not torch's
    modeling = "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/gptj/modeling_gptj.py"
    assert not is_internal(modeling)
    assert short(modeling) == "transformers/models/gptj/modeling_gptj.py"


def test_a_registered_model_fix_is_applied_in_order_with_one_signature(tiny_model_dir, monkeypatch):
    """One ModelFix in MODEL_FIXES is all a new fix needs; each sees what the one before it left."""
    import accelerate_graph.capture_flow as capture_flow
    from accelerate_graph.detect.fixes import MODEL_FIXES, ModelFix

    session = llama_session(tiny_model_dir)
    session.model.lm_head = CountingHead(session.model.lm_head)
    seen = []

    def unwrap_counting_head(session, hazards, redetect):
        seen.append([h.module_class for h in hazards])
        if not any(h.module_class == "CountingHead" for h in hazards):
            return None, hazards
        session.model.lm_head = session.model.lm_head.head
        return "the counting head was unwrapped", redetect()

    monkeypatch.setattr(capture_flow, "MODEL_FIXES", (*MODEL_FIXES, ModelFix("unwrap", unwrap_counting_head)))
    decision = decide_regions(session, "auto", 1)
    assert seen == [["CountingHead"]]
    assert decision.fixes == ["the counting head was unwrapped"]
    assert decision.regions.mode == "full" and decision.hazards == []
    eager = decide_regions(session, "eager", 1)  # no detection in eager mode: the fixes see no hazard
    assert seen[-1] == [] and eager.fixes == [] and eager.regions.mode == "eager"


def test_the_op_signature_reads_the_leaves_pytree_reads():
    """Hazard detection flattens each op's arguments itself (pytree's flatten cost a fifth of the scan):
    the same leaves, in the same order, for what aten calls take."""
    from accelerate_graph.compat.torch_internals import pytree_leaves
    from accelerate_graph.detect.hazards import _leaves

    x = torch.zeros(2, 3)
    for args, kwargs in [
        ((x, [x, x], 1, 2.5, None), {}),
        ((x, [2, 3], (0, slice(1, None)), "mean"), {"dim": [0, 1], "keepdim": True}),
        ((), {"dtype": torch.float16, "device": torch.device("cpu"), "layout": None}),
    ]:
        assert _leaves((args, kwargs), []) == pytree_leaves((args, kwargs))
