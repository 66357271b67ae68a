"""FP8 layers under the fused forward: the layer program runs them (the FP8 product one call per merged
projection), decodes like HF's forward over the same FP8 layers, and keeps the weights and scales where they
were; block scales that would straddle two projections keep them apart, and the notes say so. Under the Triton
interpreter (a child process) the fp8_fold setting folds the norms and residual adds into the FP8 kernel."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_models import tiny_decoder
from typer.testing import CliRunner

from accelerate_graph import settings
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.memory import weight_bytes
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layer_program import (
    MERGED_GATE_UP,
    MERGED_GATE_UP_SCALE,
    MERGED_OPS,
    MERGED_QKV,
    MERGED_QKV_SCALE,
    REFERENCE_OPS,
    kept_apart,
    merge_projections,
    program_for,
)
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.quant import fp8_skinny
from accelerate_graph.quant.fp8_linear import Fp8Linear

BF16_ULP_AT_ONE = 2.0**-7  # the logits here are below 1: HF's forward and the program agree within one bf16 step
FP16_ULP_AT_ONE = 2.0**-10


def fp8_tiny(block: int | None, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """The tiny llama (hidden 64, q 64, k and v 32, gate and up 128) in `dtype`, every decoder projection an
    Fp8Linear with `block` (None: per channel), grouped attention."""
    model = tiny_decoder("llama").to(dtype)
    use_grouped_attention(model)
    for layer in model.model.layers:
        for owner in (layer.self_attn, layer.mlp):
            for name, module in list(owner.named_children()):
                if type(module) is torch.nn.Linear:
                    setattr(owner, name, Fp8Linear.from_linear(module, block))
    return model


# block 16: every part a whole number of blocks (all merged); 128: q's 64 rows are half a block row (q/k/v
# kept apart) while gate/up's 128 are one (merged)
@pytest.mark.parametrize("block, apart", [(None, []), (16, []), (128, ["q/k/v"])])
def test_the_fp8_layer_program_decodes_like_hfs_forward_in_the_same_memory(block, apart):
    torch._dynamo.reset()
    torch.manual_seed(1)
    prompt, cases = torch.randint(0, 100, (2, 6)), [(2, 32), (1, 64)]
    model = tiny_decoder("llama").to(torch.bfloat16)
    use_grouped_attention(model)
    bf16 = DecodeSession(model, 2, 64).first_steps(prompt, cases)  # what the weights give before FP8
    model = fp8_tiny(block)
    session = DecodeSession(model, 2, 64)
    expected = session.first_steps(prompt, cases)
    before = weight_bytes(model)
    calls = []

    def counted_gate_up(x, w, eps, gate_up, up):
        calls.append(up is None)
        return MERGED_OPS.norm_gate_up(x, w, eps, gate_up, up)

    fused = FusedForward(model, backend="eager", ops=dataclasses.replace(MERGED_OPS, norm_gate_up=counted_gate_up))
    assert fused.programmed and fused.fp8 == ("fp8" if block is None else "fp8-block")
    assert kept_apart(model.model.layers[0]) == apart and weight_bytes(model) == before
    kind = fused.layer_forward_kind()
    assert kind.startswith(f"the layer program, merged, FP8 weights ({fused.fp8}")
    assert ("q/k/v kept apart" in kind) is bool(apart) and "skinny" not in kind
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    if not apart:
        merged, scales = getattr(attention, MERGED_QKV), getattr(attention, MERGED_QKV_SCALE)
        assert merged.dtype == torch.float8_e4m3fn and merged.shape[0] == 64 + 32 + 32
        assert attention.v_proj.weight.data_ptr() == merged[96:].data_ptr()
        assert attention.v_proj.scale.data_ptr() == scales[96 // (block or 1) :].data_ptr()
    else:
        assert getattr(attention, MERGED_QKV) is None and getattr(attention, MERGED_QKV_SCALE) is None
    gate_up, gate_up_scale = getattr(mlp, MERGED_GATE_UP), getattr(mlp, MERGED_GATE_UP_SCALE)
    assert mlp.up_proj.weight.data_ptr() == gate_up[128:].data_ptr()
    assert mlp.up_proj.scale.data_ptr() == gate_up_scale[128 // (block or 1) :].data_ptr()
    got = session.first_steps(prompt, cases, fused)
    assert calls and all(calls), "the merged FP8 gate/up never ran"
    for a, b, c in zip(got, expected, bf16):
        torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=BF16_ULP_AT_ONE)
        assert (a.float() - c.float()).abs().max() > BF16_ULP_AT_ONE  # the FP8 weights, not the bf16 ones


def test_a_scale_changed_in_place_reaches_the_merged_program():
    """The modules' scales are views of the concatenation: a change to one (a fault planted in place, a new
    checkpoint's values copied in) is what the merged product reads; merging again keeps the views."""
    layer = fp8_tiny(None).model.layers[0]
    merge_projections(layer)
    mlp = layer.mlp
    merged = getattr(mlp, MERGED_GATE_UP_SCALE)
    with torch.no_grad():
        mlp.up_proj.scale.mul_(2.0)
    assert torch.equal(merged[128:], mlp.up_proj.scale)
    merge_projections(layer)
    assert getattr(mlp, MERGED_GATE_UP_SCALE) is merged
    mlp.up_proj.scale = torch.nn.Parameter(mlp.up_proj.scale.detach().clone(), requires_grad=False)
    merge_projections(layer)  # a scale of its own: merged anew
    assert getattr(mlp, MERGED_GATE_UP_SCALE) is not merged
    assert mlp.up_proj.scale.data_ptr() == getattr(mlp, MERGED_GATE_UP_SCALE)[128:].data_ptr()


def test_layers_of_mixed_projections_or_schemes_keep_hfs_forward():
    model = fp8_tiny(None)
    layers = model.model.layers
    assert all(program_for(layer) for layer in layers)
    assert not any(program_for(layer, fp8=False) for layer in layers)  # ops that take no FP8 weights
    assert not FusedForward(model, backend="eager", ops=REFERENCE_OPS).programmed
    up = layers[0].mlp.up_proj
    layers[0].mlp.up_proj = torch.nn.Linear(up.in_features, up.out_features, bias=False, dtype=torch.bfloat16)
    layers[1].mlp.up_proj = Fp8Linear.from_linear(torch.nn.Linear(64, 128, bias=False), 128)
    assert not program_for(layers[0]) and not program_for(layers[1])


def test_cli_fuse_with_fp8_weights_runs_the_layer_program_and_verifies(tmp_path, monkeypatch):
    """The tiny recipe (hidden 128, k and v 64, gate and up 256) with block scales: gate/up merged, q/k/v kept
    apart, compiled by inductor, and verify of the plan passes."""
    from cli.main import app

    monkeypatch.chdir(tmp_path)
    torch.compiler.reset()
    args = ["--dtype", "bf16", "--device", "cpu", "--buckets", "1,2", "--max-cache-len", "32"]
    captured = CliRunner().invoke(
        app, ["capture", "tiny", *args, "--fuse", "--weights", "fp8-block", "--plan", "p.yaml"]
    )
    assert captured.exit_code == 0, captured.output
    notes = " ".join(captured.output.split())
    assert "the layer program, merged, FP8 weights (fp8-block; q/k/v kept apart" in notes, notes
    verified = CliRunner().invoke(app, ["verify", "--plan", "p.yaml", "--steps", "2"])
    assert verified.exit_code == 0, verified.output
    assert "verified:" in verified.output


def test_fp8_fold_is_a_setting_off_by_default_off_cuda():
    fold = settings.BY_NAME["fp8_fold"]
    assert fold.default == "auto" and "unmeasured" in fold.why
    assert [fold.parse(text) for text in ("auto", "on", "off", "1", "0")] == ["auto", "on", "off", "on", "off"]
    assert settings.resolve({"fp8_fold": "off"}, environ={}).fp8_fold == "off"


FOLD_RUNS = [(None, "off"), (None, "on"), (None, "auto"), (128, "off"), (128, "on")]


@pytest.fixture(scope="module")
def folded_layers():
    from test_fp8_matmul import run_worker

    job = [{"id": f"{block}-{fold}", "block": block, "fold": fold, "cases": [[2, 32]]} for block, fold in FOLD_RUNS]
    return run_worker({"layers": job}, interpreted=True)


@pytest.mark.skipif(fp8_skinny.fp8_kernels is None, reason="needs triton")
@pytest.mark.parametrize("block", [None, 128])  # per channel (all merged); q/k/v kept apart (three calls)
def test_fp8_fold_folds_the_norms_and_residuals_into_the_kernel_under_the_interpreter(folded_layers, block):
    """fp8_fold on: the layers call the folded ops (q/k/v's norm, merged gate/up's norm and activation, the
    residual adds) and decode as the unfolded program does, within float32 summation order (the rows' norms);
    off, and auto off CUDA: none, the unfolded program."""
    off, on = folded_layers[f"{block}-off"], folded_layers[f"{block}-on"]
    assert off["folded_ops"] == [] and on["folded_ops"] == [
        "fp8_matmul_residual",
        "fp8_norm_gate_up",
        "fp8_norm_matmul",
    ]
    if block is None:
        assert folded_layers["None-auto"]["folded_ops"] == []
        assert folded_layers["None-auto"]["logits"] == off["logits"]
    for a, b in zip(on["logits"], off["logits"]):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=2 * FP16_ULP_AT_ONE)
