"""The fused step's rotary table (fused/rotary_table.py): HF's own cos/sin, bit for bit, from one gather."""

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph.compat.transformers_internals import rotary_embedding_modules as rotary_modules
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.fused.rotary_table import RotaryTable, rotary_tables

ROPES = {
    "default": None,
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },  # fmt: skip
    "linear": {"rope_type": "linear", "factor": 2.0},
}


def _with_rope(model_type: str, rope: str, dtype=torch.float32):
    scaling = ROPES[rope]
    overrides = {"rope_scaling": {**scaling, "rope_theta": 500000.0}} if scaling else {}
    model = tiny_decoder(model_type, max_position_embeddings=512, **overrides).to(dtype)
    if scaling:  # transformers spells it rope_parameters now; the module must have taken the type
        assert rotary_modules(model)[0].rope_type == rope
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize(
    ("model_type", "rope"), [("llama", "default"), ("llama", "llama3"), ("llama", "linear"), ("qwen2", "default")]
)
def test_the_table_returns_the_modules_own_cos_and_sin(model_type, rope, dtype):
    model = _with_rope(model_type, rope, dtype)
    (module,) = rotary_modules(model)
    forward = rotary_tables(model, 200)[module]
    positions = torch.tensor([[0], [199], [37]])
    x = torch.zeros(3, 1, 64, dtype=dtype)
    got, expected = forward(x, positions), module(x, positions)
    for a, b in zip(got, expected):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.equal(a, b)
    # a row of positions (a prompt) too
    row = torch.arange(5, 12)[None]
    assert all(torch.equal(a, b) for a, b in zip(forward(x[:1], row), module(x[:1], row)))


def test_a_module_taking_more_arguments_keeps_hfs_module():
    """(Length-dependent rope types: tests/compat.)"""

    class LayerTyped(torch.nn.Module):  # one module for two kinds of layer (Gemma-3 style)
        def __init__(self):
            super().__init__()
            self.inv_freq = torch.ones(4)

        def forward(self, x, position_ids, layer_type=None):
            return x, x

    holder = torch.nn.Module()
    holder.rotary_emb = LayerTyped()
    assert rotary_modules(holder) == []


def test_a_module_whose_rows_depend_on_the_call_gets_no_table():
    """The build-time check: a module whose output for a position changes with the other positions of the
    call (what a table cannot reproduce) is left alone."""

    class ShapeDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inv_freq = torch.ones(4)

        def forward(self, x, position_ids):
            value = position_ids[..., None].float() * self.inv_freq + position_ids.shape[-1]
            return value.cos().to(x.dtype), value.sin().to(x.dtype)

    module = ShapeDependent()
    assert RotaryTable.build(module, 16, torch.float32) is None
    assert RotaryTable.build(module, 1, torch.float32) is not None  # one position: each call alike


def test_the_fused_step_gathers_the_table_and_decodes_the_same(monkeypatch):
    """The step with the table decodes exactly what it decodes without one, and HF's rotary forward runs
    only for the prompt (eager), no longer in the fused step."""
    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 100, (2, 6))
    (module,) = rotary_modules(model)
    with_table = FusedForward(model, backend="eager", positions=session.kv.storage_len)
    without = FusedForward(model, backend="eager")
    assert module in with_table.rotary and "rotary table" in with_table.layer_forward_kind()
    assert not without.rotary
    calls = []
    hfs = type(module).forward
    monkeypatch.setattr(type(module), "forward", lambda *a, **k: calls.append(1) or hfs(*a, **k))
    cases = [(2, 32), (1, 64)]
    got = session.first_steps(prompt, cases, with_table)
    with_table_calls = len(calls)
    expected = session.first_steps(prompt, cases, without)
    assert len(calls) - with_table_calls > with_table_calls  # HF's module ran in every step without the table
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
