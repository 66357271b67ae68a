"""The written-out decoder layer (fused/layer_program.py) against HF's own forward, on the CPU."""

import pytest
import torch
from tiny_models import grouped_decode_cases, tiny_decoder

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused import layer_program as program_module
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layer_program import REFERENCE_OPS, LayerOps, program_for
from accelerate_graph.fused.layers import FusedForward


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral"])
def test_the_layer_program_decodes_like_hfs_forward(model_type):
    torch._dynamo.reset()
    model = tiny_decoder(model_type)
    if model_type == "mistral":
        model.config.sliding_window = None
        for layer in model.model.layers:
            layer.self_attn.config.sliding_window = None
    use_grouped_attention(model)
    assert all(program_for(layer) for layer in model.model.layers)
    session = DecodeSession(model, 2, 64)
    calls = []
    counted = LayerOps(
        "counted",
        REFERENCE_OPS.norm_projections,
        REFERENCE_OPS.linear_residual,
        lambda *a: calls.append(1) or REFERENCE_OPS.norm_gate_up(*a),
    )
    fused = FusedForward(model, backend="eager", ops=counted)
    assert fused.programmed
    cases = [(2, 32), (1, 64)]
    prompt = torch.randint(0, 100, (2, 6))
    got = session.first_steps(prompt, cases, fused)
    expected = session.first_steps(prompt, cases)
    assert calls, "the program never ran"
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_wrong_op_is_seen_in_the_logits():
    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    wrong = LayerOps(
        "wrong",
        REFERENCE_OPS.norm_projections,
        lambda x, w, b, r: REFERENCE_OPS.linear_residual(x, w, b, r) * 1.01,
        REFERENCE_OPS.norm_gate_up,
    )
    prompt = torch.randint(0, 100, (2, 6))
    got = session.first_steps(prompt, [(2, 32)], FusedForward(model, backend="eager", ops=wrong))
    expected = session.first_steps(prompt, [(2, 32)])
    assert not torch.allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model_type", ["qwen3", "olmoe"])
def test_layers_the_program_does_not_cover_keep_hfs_forward(model_type):
    model = tiny_decoder(model_type)
    from accelerate_graph.fused.layers import decoder_layers

    assert not any(program_for(layer) for layer in decoder_layers(model))


def test_a_layer_with_a_hook_keeps_hfs_forward():
    """The program calls only o_proj and down_proj as modules (when they have hooks), so a hook anywhere
    else in the layer would silently not run: such a layer keeps HF's forward."""
    model = tiny_decoder("llama")
    from accelerate_graph.fused.layers import decoder_layers

    layers = decoder_layers(model)
    assert all(program_for(layer) for layer in layers)
    for module in (layers[0].mlp.gate_proj, layers[0].self_attn.q_proj, layers[0].input_layernorm):
        handle = module.register_forward_hook(lambda module, args, output: output)
        assert not program_for(layers[0]) and program_for(layers[1])
        handle.remove()
    handle = layers[0].mlp.down_proj.register_forward_pre_hook(lambda module, args: None)
    assert program_for(layers[0])  # called as a module: its hooks run (next test)
    handle.remove()


@pytest.mark.parametrize("ops_name", ["reference", "merged"])
def test_hooks_on_the_output_projections_run_like_hfs(ops_name):
    """Tensor parallel sums the ranks' parts of o_proj and down_proj in a forward hook, then adds the
    bias (distributed/sharding.py). The program calls those two modules, so their hooks run: the same
    logits as HF's forward with the same hooks, and different ones without them."""
    from accelerate_graph.fused.layer_program import MERGED_OPS
    from accelerate_graph.fused.layers import decoder_layers

    torch._dynamo.reset()
    model, session, prompt, cases, plain = grouped_decode_cases("llama")
    calls = []

    def like_an_all_reduce(module, args, output):  # any change a hook makes must reach the logits
        calls.append(1)
        return output * 2.0 + module.tp_bias

    torch.manual_seed(1)
    for layer in decoder_layers(model):
        for module in (layer.self_attn.o_proj, layer.mlp.down_proj):
            module.tp_bias = torch.randn(module.out_features) * 0.1
            module.register_forward_hook(like_an_all_reduce)
    expected = session.first_steps(prompt, cases)
    hf_calls, calls[:] = len(calls), []
    ops = MERGED_OPS if ops_name == "merged" else REFERENCE_OPS
    fused = FusedForward(model, backend="eager", ops=ops)
    assert fused.programmed
    got = session.first_steps(prompt, cases, fused)
    assert hf_calls and len(calls) == hf_calls
    for a, b, c in zip(got, expected, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(a, c, rtol=1e-3, atol=1e-3)


def test_a_linear_subclass_keeps_hfs_forward():
    """A subclass of nn.Linear may run its own forward over a packed weight (a quantized layer): the
    program, which calls F.linear on the weight itself, leaves that layer to HF's forward."""
    from accelerate_graph.fused.layers import decoder_layers

    class PackedLinear(torch.nn.Linear):
        pass

    model = tiny_decoder("llama")
    layers = decoder_layers(model)
    old = layers[1].mlp.up_proj
    layers[1].mlp.up_proj = PackedLinear(old.in_features, old.out_features, bias=False)
    assert program_for(layers[0]) and not program_for(layers[1])


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_merged_projections_decode_like_hfs_forward_in_the_same_memory(model_type):
    """q/k/v and gate/up as one projection each (MERGED_OPS): the same logits as HF's forward, the
    modules' weights now views of the concatenations (no byte more), and merging twice changes nothing."""
    from accelerate_graph.core.memory import weight_bytes
    from accelerate_graph.fused.layer_program import MERGED_GATE_UP, MERGED_OPS, MERGED_QKV, merge_projections

    torch._dynamo.reset()
    model, session, prompt, cases, expected = grouped_decode_cases(model_type)
    before = weight_bytes(model)
    q_weight = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    calls = []
    counted = LayerOps(
        "counted",
        MERGED_OPS.norm_projections,
        MERGED_OPS.linear_residual,
        lambda x, w, eps, gate_up, up: calls.append(up is None) or MERGED_OPS.norm_gate_up(x, w, eps, gate_up, up),
        merged=True,
    )
    fused = FusedForward(model, backend="eager", ops=counted)
    assert fused.programmed
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    merged = getattr(attention, MERGED_QKV)
    assert merged.shape[0] == sum(p.out_features for p in (attention.q_proj, attention.k_proj, attention.v_proj))
    assert attention.q_proj.weight.untyped_storage().data_ptr() == merged.untyped_storage().data_ptr()
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == getattr(mlp, MERGED_GATE_UP).untyped_storage().data_ptr()
    assert torch.equal(attention.q_proj.weight, q_weight) and weight_bytes(model) == before
    merge_projections(model.model.layers[0])
    assert getattr(attention, MERGED_QKV) is merged
    got = session.first_steps(prompt, cases, fused)
    assert calls and all(calls), "the merged gate/up never ran"
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_merging_again_after_a_dtype_change_rebuilds_the_views():
    """`.to()` gives each projection a tensor of its own and converts the concatenation separately: the
    merged program would then read numbers a later in-place change of a weight never reaches. Merging
    again (a new FusedForward does) rebuilds the views; an intact merge is left as it is."""
    from accelerate_graph.fused.layer_program import MERGED_GATE_UP, MERGED_QKV, MERGED_QKV_BIAS, merge_projections

    layer = tiny_decoder("qwen2").model.layers[0]  # q/k/v with biases
    merge_projections(layer)
    attention, mlp = layer.self_attn, layer.mlp
    merged = getattr(attention, MERGED_QKV)
    merge_projections(layer)
    assert getattr(attention, MERGED_QKV) is merged  # intact: kept
    layer.to(torch.float64)
    assert (
        attention.k_proj.weight.data_ptr() != getattr(attention, MERGED_QKV)[attention.q_proj.out_features].data_ptr()
    )
    merge_projections(layer)
    qkv, bias, gate_up = (
        getattr(attention, MERGED_QKV),
        getattr(attention, MERGED_QKV_BIAS),
        getattr(mlp, MERGED_GATE_UP),
    )
    assert qkv.dtype == torch.float64 and qkv is not merged
    with torch.no_grad():
        attention.v_proj.weight.add_(1.0)
        attention.k_proj.bias.add_(1.0)
        mlp.up_proj.weight.add_(1.0)
    q, k = attention.q_proj.out_features, attention.k_proj.out_features
    assert torch.equal(qkv[q + k :], attention.v_proj.weight) and torch.equal(bias[q : q + k], attention.k_proj.bias)
    assert torch.equal(gate_up[mlp.gate_proj.out_features :], mlp.up_proj.weight)


def test_the_fused_step_advances_every_position_once_after_its_layers(monkeypatch):
    """The program writes K/V at each layer's position without HF's per-layer add; FusedForward advances
    every layer's position after the step (one kernel on a GPU). Two steps in a row: a position left
    behind would have the second step overwrite the first's slot; one advanced twice would skip one."""
    import accelerate_graph.fused.layers as fused_layers

    torch._dynamo.reset()
    model = tiny_decoder("llama")
    use_grouped_attention(model)
    advances = []
    monkeypatch.setattr(
        fused_layers,
        "decode_layer",
        lambda *a, advance=True, **k: advances.append(advance) or program_module.decode_layer(*a, advance=advance, **k),
    )
    fused = FusedForward(model, backend="eager", ops=REFERENCE_OPS)
    runs = {}
    for name, runner in (("eager", None), ("fused", fused)):
        session = DecodeSession(model, 2, 64)
        with torch.no_grad():
            session.prefill(torch.arange(12).reshape(2, 6) + 5)
        logits = []
        for step in range(2):
            session.load_inputs(2, torch.tensor([7, 9]) + step, torch.full((2,), 6 + step))
            with torch.no_grad():
                logits.append(session.step_fn(2, 32, runner)())
            session.kv.advance()
        positions = [int(p) for p in session.kv.positions()]
        runs[name] = (logits, positions, [layer.keys.clone() for layer in session.kv.layers])
    assert advances and not any(advances), "the program advanced positions itself"
    (eager_logits, eager_positions, eager_keys), (fused_logits, fused_positions, fused_keys) = (
        runs["eager"],
        runs["fused"],
    )
    assert fused_positions == eager_positions == [8] * len(model.model.layers)
    for a, b in zip(fused_logits + fused_keys, eager_logits + eager_keys):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
