"""The step's LM head at batch 1 on the skinny kernels (fused/lm_head.py), on for the head shapes measured
faster. On the CPU the op runs its reference (or, under TRITON_INTERPRET=1, the Triton kernel in the
interpreter)."""

import pytest
import torch
from tiny_models import grouped_decode_cases, tiny_decoder

from accelerate_graph import settings
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.fused import lm_head
from accelerate_graph.fused.kernels import skinny_matmul
from accelerate_graph.fused.layers import FusedForward


def test_batch_1_runs_the_head_on_the_skinny_op_and_decodes_the_same(monkeypatch):
    torch._dynamo.reset()
    model, session, prompt, cases, hfs = grouped_decode_cases("llama", cases=((1, 32), (2, 32)))
    assert settings.DEFAULTS.lm_head_kernel == "auto"  # the tiny model's head shape was never measured
    without = FusedForward(model, backend="eager")
    with_kernel = FusedForward(model, backend="eager", settings=settings.DEFAULTS.replace(lm_head_kernel="on"))
    assert not without.lm_head and "LM head kernel" not in without.layer_forward_kind()
    assert model.lm_head in with_kernel.lm_head and "LM head kernel at batch 1" in with_kernel.layer_forward_kind()
    heads = []  # the output widths of the skinny op's calls
    original = skinny_matmul.norm_projections
    monkeypatch.setattr(
        lm_head, "norm_projections", lambda x, *a, **k: heads.append(a[3][0].shape[0]) or original(x, *a, **k)
    )
    got = session.first_steps(prompt, cases, with_kernel)
    assert heads == [model.config.vocab_size]  # batch 1's step only: batch 2 keeps cuBLAS's
    expected = session.first_steps(prompt, cases, without)
    for a, b, hf in zip(got, expected, hfs):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, hf)


def test_not_for_a_head_that_is_no_plain_linear_over_a_plain_tensor():
    model = tiny_decoder("llama")
    assert model.lm_head in lm_head.lm_head_kernel(model, "on")
    linear = model.lm_head
    model.lm_head = torch.nn.Sequential(linear)
    assert lm_head.lm_head_kernel(model, "on") == {}

    class Shard(torch.Tensor):  # stands for a DTensor: a tensor subclass under the parameter
        pass

    linear.weight = torch.nn.Parameter(linear.weight.detach().as_subclass(Shard))
    model.lm_head = linear
    assert lm_head.lm_head_kernel(model, "on") == {}


def test_auto_takes_only_the_head_shapes_measured_faster(monkeypatch):
    assert lm_head.HEAD_WINS_AT_BATCH_1 == {(128256, 2048)}  # Llama-3.2-1B's head (H200)
    model = tiny_decoder("llama")
    vocab, hidden = model.lm_head.weight.shape
    assert lm_head.lm_head_kernel(model, "auto") == {}  # a shape not in the table of wins
    monkeypatch.setattr(lm_head, "HEAD_WINS_AT_BATCH_1", frozenset({(vocab, hidden)}))
    assert model.lm_head in lm_head.lm_head_kernel(model, "auto")
    assert lm_head.lm_head_kernel(model, "off") == {}


@pytest.mark.parametrize("text", ["maybe", "2", "true"])
def test_a_bad_value_is_one_clear_error_naming_the_setting(text):
    with pytest.raises(BadOptionError, match=r"^assignments sets lm_head_kernel to .* which is not auto, on or off\."):
        settings.resolve({"lm_head_kernel": text}, environ={})
