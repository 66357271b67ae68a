"""The FP8 format and layer: round to nearest with amax / 448 scales, per channel and per block (partial
blocks included), the emulated product equal to a matmul by the dequantized weight, quantize_model's
choice of layers and its refusals, and the bytes the memory counts see."""

from __future__ import annotations

import weakref

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.memory import weight_bytes
from accelerate_graph.quant.fp8_format import E4M3, E4M3_MAX, dequantize, quantize
from accelerate_graph.quant.fp8_linear import Fp8Linear
from accelerate_graph.quant.quantize import ensure_weights, fp8_layers, fp8_scheme, quantize_model


@pytest.mark.parametrize("block", [None, 128])
def test_each_channel_or_block_reaches_448_and_rounds_to_the_nearest_e4m3(block):
    torch.manual_seed(0)
    weight = torch.randn(300, 200) * torch.linspace(0.01, 3, 300)[:, None]  # rows of very different size
    q, scale = quantize(weight, block)
    assert q.dtype == E4M3 and scale.dtype == torch.float32
    assert scale.shape == ((300,) if block is None else (3, 2))  # ceil(300/128) x ceil(200/128)
    if block is None:
        assert torch.equal(q.float().abs().amax(dim=1), torch.full((300,), E4M3_MAX))
    else:
        assert q.float().abs().amax() == E4M3_MAX and q[256:, 128:].float().abs().amax() == E4M3_MAX
    # round to nearest: no e4m3 value lies closer to the scaled weight than the one chosen
    scaled = weight / dequantize(torch.ones_like(q, dtype=torch.float32).to(E4M3), scale, block)
    values = torch.arange(256, dtype=torch.uint8).view(E4M3).float()
    values = values[values.isfinite()]
    nearest = (scaled.reshape(-1, 1) - values).abs().min(dim=1).values
    assert torch.allclose((scaled.reshape(-1) - q.float().reshape(-1)).abs(), nearest, rtol=0, atol=1e-6)
    error = (dequantize(q, scale, block) - weight).abs() / weight.abs().amax(dim=1, keepdim=True)
    assert error.max() < 2**-4  # half an e4m3 step (3 mantissa bits) at the largest value


def test_a_zero_channel_keeps_a_finite_scale():
    weight = torch.randn(4, 8)
    weight[1] = 0
    q, scale = quantize(weight, None)
    assert scale[1] == 1 and torch.equal(dequantize(q, scale, None)[1], torch.zeros(8))


@pytest.mark.parametrize("block", [None, 128])
def test_the_layer_multiplies_by_its_dequantized_weight(block):
    torch.manual_seed(1)
    linear = torch.nn.Linear(200, 130, bias=True).to(torch.bfloat16)
    layer = Fp8Linear.from_linear(linear, block)
    x = torch.randn(3, 200, dtype=torch.bfloat16)
    expected = torch.nn.functional.linear(x.float(), layer.dequantized(), linear.bias.float()).to(torch.bfloat16)
    assert torch.equal(layer(x), expected)  # float32 throughout, one rounding to x's dtype
    assert not torch.equal(layer(x), linear(x))  # FP8 rounding shows
    # the float32 reference promotes the weight: the exact FP8 values, scaled in float32
    layer.weight.data, layer.bias.data = layer.weight.data.float(), layer.bias.data.float()
    exact = x.float() @ layer.dequantized().T + linear.bias.float()
    assert torch.allclose(layer(x.float()), exact, atol=1e-5)


def test_scales_of_the_wrong_shape_are_refused():
    q, _ = quantize(torch.randn(256, 256), 128)
    with pytest.raises(ValueError, match=r"expected \(2, 2\)"):
        Fp8Linear(q, torch.ones(256), 128)


def test_the_decoder_is_quantized_and_the_head_and_embeddings_are_kept():
    model = tiny_decoder("llama").to(torch.bfloat16)
    done = quantize_model(model, "fp8-block")
    names = {name for name, module in model.named_modules() if isinstance(module, Fp8Linear)}
    layers = model.config.num_hidden_layers
    assert len(names) == done.layers == 7 * layers  # q, k, v, o, gate, up, down
    assert type(model.lm_head) is torch.nn.Linear and model.lm_head.weight.dtype == torch.bfloat16
    assert fp8_scheme(model) == "fp8-block" and all(layer.block == 128 for layer in fp8_layers(model))
    head_too = tiny_decoder("llama").to(torch.bfloat16)
    quantize_model(head_too, "fp8", keep=("embed",))
    assert isinstance(head_too.lm_head, Fp8Linear) and head_too.lm_head.block is None


def test_each_original_layer_goes_as_soon_as_its_fp8_layer_replaces_it(monkeypatch):
    """Quantizing on the GPU holds the bf16 layers not yet replaced, not every one to the end (an 8B's load
    peaked at its bf16 and FP8 weights together, over the command's bound)."""
    model = tiny_decoder("llama").to(torch.bfloat16)
    linear = [m for name, m in model.named_modules() if type(m) is torch.nn.Linear and "lm_head" not in name]
    originals = [weakref.ref(m) for m in linear]
    del linear
    alive = []
    from_linear = Fp8Linear.from_linear.__func__

    def counting(cls, layer, block):
        alive.append(sum(ref() is not None for ref in originals))
        return from_linear(cls, layer, block)

    monkeypatch.setattr(Fp8Linear, "from_linear", classmethod(counting))
    quantize_model(model, "fp8")
    assert alive == list(range(len(originals), 0, -1))
    assert all(ref() is None for ref in originals)


def test_the_same_scheme_again_is_no_second_quantization_and_another_is_refused():
    model = tiny_decoder("llama").to(torch.bfloat16)
    assert ensure_weights(model, "fp8") is not None
    assert ensure_weights(model, "fp8") is None and ensure_weights(model, "model") is None
    with pytest.raises(BadOptionError, match="already holds FP8 layers"):
        ensure_weights(model, "fp8-block")


def test_a_float32_model_and_an_unknown_scheme_are_refused():
    with pytest.raises(BadOptionError, match="bf16 or fp16 activations, and this run is float32"):
        quantize_model(tiny_decoder("llama"), "fp8")
    with pytest.raises(BadOptionError, match="not one of model, fp8, fp8-block"):
        ensure_weights(tiny_decoder("llama").to(torch.bfloat16), "int4")


def test_originals_kept_come_back_and_the_bytes_counted_are_fp8s():
    model = tiny_decoder("llama").to(torch.bfloat16)
    before = weight_bytes(model)
    x = torch.randint(0, 100, (1, 5))
    with torch.no_grad():
        plain = model(x).logits
        done = quantize_model(model, "fp8", keep_originals=True)
        quantized = model(x).logits
        after = weight_bytes(model)
        done.restore()
        assert torch.equal(model(x).logits, plain) and not torch.equal(quantized, plain)
    linear = sum(fp8.weight.numel() for *_, fp8 in done.swaps)
    scales = sum(fp8.scale.numel() for *_, fp8 in done.swaps)
    assert before - after == 2 * linear - (linear + 4 * scales)  # 2 bytes a weight in bf16; 1 + the scales in FP8
