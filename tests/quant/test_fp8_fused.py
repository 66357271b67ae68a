"""FP8 layers under the fused forward: the merged layer program concatenates plain Linear weights only, so
FP8 layers run HF's layer forward compiled by inductor (the FP8 product one call inside it), and the notes
say why."""

from __future__ import annotations

import torch
from tiny_models import tiny_decoder

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layer_program import program_for
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.quant.quantize import quantize_model


def test_fp8_layers_compile_with_hfs_forward_and_match_eager():
    torch._dynamo.reset()
    model = tiny_decoder("llama").to(torch.bfloat16)
    quantize_model(model, "fp8-block")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    fused = FusedForward(model)
    assert not fused.programmed and not any(program_for(layer) for layer in fused.layers)
    assert "HF's layer forward (FP8 layers: the layer program merges plain Linear weights only)" in (
        fused.layer_forward_kind()
    )
    cases = [(2, 32), (1, 32)]
    prompt = torch.randint(0, 256, (2, 6))
    got = session.first_steps(prompt, cases, fused)
    expected = session.first_steps(prompt, cases)
    assert fused.recompiles == 0
    for a, b in zip(got, expected):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
