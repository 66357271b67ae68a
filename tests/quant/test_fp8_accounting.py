"""What FP8 weights cost in bytes: the memory bound's weights and the bench floor count one byte per FP8 weight
plus its float32 scales, the LM head and embeddings at their own width; and the drop-in API runs FP8 weights
for the handle's life and puts the originals back."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph import accelerate
from accelerate_graph.bench.floor import step_bytes
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.memory import command_bound
from accelerate_graph.quant.fp8_linear import Fp8Linear
from accelerate_graph.quant.quantize import fp8_layers, quantize_model


def _bytes_by_kind(model) -> tuple[int, int]:
    """(FP8 layers' weight + scale + bias bytes, every other parameter's bytes)."""
    fp8 = sum(p.nbytes for layer in fp8_layers(model) for p in layer.parameters())
    return fp8, sum(p.nbytes for p in model.parameters()) - fp8


@pytest.mark.parametrize("scheme", ["fp8", "fp8-block"])
def test_the_floor_and_the_memory_bound_count_fp8_bytes(scheme):
    model = tiny_decoder("llama", tie_word_embeddings=False).to(torch.bfloat16)
    quantize_model(model, scheme)
    layers = fp8_layers(model)
    assert all(layer.weight.element_size() == 1 and layer.scale.dtype == torch.float32 for layer in layers)
    fp8, rest = _bytes_by_kind(model)
    weights = sum(layer.weight.numel() for layer in layers)
    scales = sum(layer.scale.numel() for layer in layers)
    assert fp8 == weights + 4 * scales
    session = DecodeSession(model, 2, 32)
    embedding = model.get_input_embeddings().weight
    gathered = 2 * embedding.shape[1] * embedding.element_size()  # a step reads its rows' embeddings only
    assert step_bytes(session, 2, 16).weights == fp8 + rest - embedding.nbytes + gathered
    bound = command_bound(session, 0, 6, 3, False)
    assert bound.parts["weights"] == fp8 + rest + sum(b.nbytes for b in model.buffers())


def test_accelerate_runs_fp8_weights_and_undo_puts_the_originals_back():
    model = tiny_decoder("llama").to(torch.bfloat16)
    model.generation_config.eos_token_id = None  # six new tokens, whichever they are
    originals = {name: m for name, m in model.named_modules() if type(m) is torch.nn.Linear}
    ids = torch.tensor([[5, 9, 13, 2]])
    kwargs = dict(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    plain = model.generate(**kwargs)
    with accelerate(model, buckets=(1,), max_cache_len=32, contexts=(), emulate=True, weights="fp8") as handle:
        assert len(fp8_layers(model)) == len(originals) - 1  # all but the LM head
        assert any("in FP8 e4m3" in note for note in handle.notes)
        fp8 = model.generate(**kwargs)
        assert handle.counts.graph_steps == 5
        with torch.no_grad():
            eager = _greedy_eager(model, ids, 6)
        assert fp8[0].tolist() == eager
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())
    assert all(model.get_submodule(name) is module for name, module in originals.items())
    assert torch.equal(model.generate(**kwargs), plain)


def _greedy_eager(model, ids, new: int) -> list[int]:
    tokens = ids[0].tolist()
    for _ in range(new):
        logits = model(torch.tensor([tokens])).logits[0, -1]
        tokens.append(int(logits.argmax()))
    return tokens


def test_accelerate_refuses_fp8_on_a_float32_model_and_leaves_it_alone():
    model = tiny_decoder("llama")
    with pytest.raises(BadOptionError, match="bf16 or fp16 activations"):
        accelerate(model, buckets=(1,), max_cache_len=32, weights="fp8")
    assert not fp8_layers(model)
