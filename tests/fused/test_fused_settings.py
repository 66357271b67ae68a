"""The fused forward's settings (inductor_tuning, gemv_materialize): taken by value, and what they change."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace as N

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph import settings
from accelerate_graph.fused import gemv_lowering, layers
from accelerate_graph.fused.layers import FusedForward


def _model(hidden: int):
    return N(config=N(get_text_config=lambda: N(hidden_size=hidden)))


def test_kernel_tuning_follows_the_hidden_size_unless_the_setting_says():
    """Coordinate-descent tuning runs for a hidden size of TUNE_FROM_HIDDEN_SIZE or more (where the GEMVs
    are long enough to pay for it) unless the skinny kernels run batch 1's GEMVs; inductor_tuning on / off
    forces it on / off. Tuned configs are never read back from inductor's cache."""
    small, large = _model(layers.TUNE_FROM_HIDDEN_SIZE - 1), _model(4096)
    seen = {
        tuning: (
            layers.tune_pays(small, tuning),
            layers.tune_pays(large, tuning),
            layers.tune_pays(large, tuning, batch_1_skinny=True),
        )
        for tuning in ("auto", "off", "on")
    }
    assert seen == {"auto": (False, True, False), "off": (False, False, False), "on": (True, True, True)}
    assert layers.TUNE_SETTINGS == {"coordinate_descent_tuning": True, "autotune_local_cache": False}


@pytest.mark.parametrize("batch_1_skinny", [False, True])
def test_the_fused_step_tunes_only_where_inductor_runs_batch_1s_gemvs(batch_1_skinny, monkeypatch):
    """Where the skinny kernels run every GEMV of batch 1, inductor compiles only small kernels, and the
    step compiles untuned (no gain measured there)."""
    monkeypatch.setattr(layers, "TUNE_FROM_HIDDEN_SIZE", 1)  # the tiny model's hidden size tunes
    monkeypatch.setattr(layers.FusedForward, "_on_skinny_path", lambda self: True)  # as on a GPU
    monkeypatch.setattr(layers, "layer_at_batch_1_is_skinny", lambda layer: batch_1_skinny)
    fused = FusedForward(tiny_decoder("llama"), backend="aot_eager")
    assert fused.settings is settings.DEFAULTS and fused.settings.inductor_tuning == "auto"
    assert fused.tuned is not batch_1_skinny
    assert ("kernels tuned" in fused.layer_forward_kind()) is not batch_1_skinny
    assert ("skinny GEMV kernels at batch 1" in fused.layer_forward_kind()) is batch_1_skinny
    forced = FusedForward(tiny_decoder("llama"), backend="aot_eager", settings=settings.DEFAULTS.replace(
        inductor_tuning="off"))  # fmt: skip
    assert not forced.tuned and "coordinate_descent_tuning" not in forced.inductor_options


def test_settings_none_means_those_in_use_at_construction():
    chosen = settings.DEFAULTS.replace(rotary_table=False, mask_kernel=False)
    model = tiny_decoder("llama")
    with settings.use(chosen):
        fused = FusedForward(model, backend="aot_eager", positions=64)
    assert fused.settings is chosen and not fused.rotary and fused.causal_mask is None
    default = FusedForward(model, backend="aot_eager", positions=64)
    assert default.rotary and default.causal_mask is not None


@pytest.mark.parametrize("materialize", [False, True])
def test_one_row_gemv_lowering_computes_the_product(monkeypatch, materialize):
    """The decomposition's value is mat1 @ mat2, its input stored or not (gemv_materialize; checked on the
    CPU by letting the device test pass); two rows keep the matmul."""
    weight = torch.empty(64, 32, device="meta")
    assert gemv_lowering.mm_as_reduction(torch.empty(2, 64, device="meta"), weight) is NotImplemented
    monkeypatch.setattr(gemv_lowering, "_one_row", lambda mat1: mat1.size(0) == 1)
    stored = []
    monkeypatch.setattr(gemv_lowering, "inductor_materialized", lambda x: stored.append(x) or x)
    monkeypatch.setattr(gemv_lowering, "inductor_decompositions_replaced", lambda makers: contextlib.nullcontext())
    monkeypatch.setattr(gemv_lowering, "inductor_cache_tagged", lambda tag: contextlib.nullcontext())
    torch.manual_seed(0)
    weight, row = torch.randn(64, 32), torch.randn(1, 64)
    with gemv_lowering.gemv_at_batch_1(True, materialize):
        torch.testing.assert_close(gemv_lowering.mm_as_reduction(row, weight), row @ weight)
    assert len(stored) == int(materialize)
