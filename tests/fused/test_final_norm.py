"""The fused step's final RMSNorm as one kernel (fused/final_norm.py), wired where the layer program runs."""

import torch
from tiny_models import tiny_decoder

from accelerate_graph import settings
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward


def test_the_step_runs_the_kernel_in_place_of_hfs_final_norm_and_decodes_the_same(monkeypatch):
    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 100, (2, 6))
    assert settings.DEFAULTS.final_norm_kernel  # on by default since measured on the H200
    with settings.use(settings.DEFAULTS):
        with_kernel = FusedForward(model, backend="eager")
    with settings.use(settings.DEFAULTS.replace(final_norm_kernel=False)):
        without = FusedForward(model, backend="eager")
    assert not without.final_norm
    assert model.model.norm in with_kernel.final_norm and "final norm kernel" in with_kernel.layer_forward_kind()
    calls = []
    hfs = type(model.model.norm).forward
    monkeypatch.setattr(type(model.model.norm), "forward", lambda *a, **k: calls.append(1) or hfs(*a, **k))
    cases = [(2, 32), (1, 64)]
    got = session.first_steps(prompt, cases, with_kernel)
    with_kernel_calls = len(calls)  # the prompt's (eager) only
    expected = session.first_steps(prompt, cases, without)
    assert len(calls) - with_kernel_calls > with_kernel_calls
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)  # the interpreter's kernel, if on, sums rstd in another order


def test_only_where_the_layer_program_runs():
    qwen3 = tiny_decoder("qwen3")  # q_norm/k_norm: HF's layer forward
    with settings.use(settings.DEFAULTS.replace(final_norm_kernel=True)):
        fused = FusedForward(qwen3, backend="eager")
    assert not fused.programmed and not fused.final_norm
