"""Hazard detection, region plans and piecewise capture under the CPU emulation."""

import pytest
import torch
from conftest import SMALL_DECODER
from transformers import AutoConfig, AutoModelForCausalLM

from accelerate_graph.backends import EmulatedBackend
from accelerate_graph.capture import capture_decode_graphs
from accelerate_graph.decode_session import DecodeSession
from accelerate_graph.errors import CaptureError
from accelerate_graph.hazards import find_hazards
from accelerate_graph.loading import load_model
from accelerate_graph.pipeline import decide_regions
from accelerate_graph.verify import verify_graphs

CPU = torch.device("cpu")


class CountingHead(torch.nn.Module):
    """lm_head plus a Python counter: eager sees it advance, a whole-step replay would freeze it."""

    def __init__(self, head: torch.nn.Linear):
        super().__init__()
        self.head = head
        self.calls = 0

    def forward(self, hidden):
        self.calls += 1
        return self.head(hidden) + self.calls


class HostReadingNorm(torch.nn.Module):
    """A norm that reads a device value on the host every step (a .item())."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, hidden):
        scale = float(hidden.abs().max().item() >= 0)
        return self.norm(hidden) * scale


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
    assert "test_regions.py" in hazards[0].location
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


def test_mode_full_refuses_an_unsafe_step_with_the_reason(tiny_model_dir):
    session = llama_session(tiny_model_dir)
    session.model.lm_head = CountingHead(session.model.lm_head)
    with pytest.raises(CaptureError, match="--mode full refused: python-value in lm_head"):
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
    with pytest.raises(CaptureError, match="--mode piecewise refused"):
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
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "falcon",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_kv_heads=2,
        vocab_size=256,
        new_decoder_architecture=True,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    session = DecodeSession(model, 4, 64)
    decision = decide_regions(session, "auto", 1)
    assert decision.regions.mode == "piecewise"
    assert decision.regions.islands == ["transformer.h.0.self_attention", "transformer.h.1.self_attention"]
    rows = capture_and_verify(session, decision)
    assert all(r.passed for r in rows)


def test_locations_point_at_modeling_code_even_under_a_folder_named_torch():
    from accelerate_graph.source_location import is_internal, short

    assert is_internal(torch.__file__)
    assert is_internal(__import__("accelerate_graph.hazards").hazards.__file__)
    # the GPU machine's transformers lives in /opt/torch/.venv: that is modeling code, not torch's
    modeling = "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/gptj/modeling_gptj.py"
    assert not is_internal(modeling)
    assert short(modeling) == "transformers/models/gptj/modeling_gptj.py"
