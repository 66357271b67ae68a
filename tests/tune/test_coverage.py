"""How many of a model's layer products a GPU's tuning table holds (tune/coverage.py), and the bench header's
word on it: the shipped H100 FP8 table was swept on the 8B's and the 1B's shapes, not Qwen2.5-0.5B's; the
H200's on the 8B's alone."""

from __future__ import annotations

import dataclasses

import pytest

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.quant import fp8_skinny
from accelerate_graph.tune import table
from accelerate_graph.tune.coverage import coverage_of, table_coverage
from accelerate_graph.tune.model_shapes import layer_shapes

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
GPU = "Test GPU"
VERSIONS = {"torch": "2.13.0", "triton": "3.9.0"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """An empty user cache folder: only the shipped tables serve; tables read afresh before and after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    configs.forget_tables()
    fp8_skinny.forget_tables()
    yield
    configs.forget_tables()
    fp8_skinny.forget_tables()


def test_the_shipped_h100_fp8_table_holds_the_8b_and_the_1b_and_none_of_qwen():
    for recipe in ("llama-3.1-8b", "llama-3.2-1b"):
        found = table_coverage(recipe, None, (1, 8, 32), H100, "fp8")
        assert (found.table, found.held, found.calls, found.missing) == ("fp8_tuning_table", 12, 12, ()), recipe
    qwen = table_coverage("qwen2.5-0.5b", None, (1, 8, 32), H100, "fp8")
    assert (qwen.held, qwen.calls) == (0, 12)
    assert "fp8_channel|m32|n896|k4864" in qwen.missing  # its down projection at 32 rows
    assert table_coverage("llama-3.1-8b", None, (1, 8, 32), H100, "model").table == "tuning_table"


def test_the_shipped_h200_fp8_table_holds_the_8b_alone():
    found = table_coverage("llama-3.1-8b", None, (1, 8, 32), H200, "fp8")
    assert (found.table, found.held, found.calls, found.missing) == ("fp8_tuning_table", 12, 12, ())
    one_b = table_coverage("llama-3.2-1b", None, (1, 8, 32), H200, "fp8")
    assert (one_b.held, one_b.calls) == (0, 12)


def test_a_table_holding_some_products_is_counted_and_names_the_rest():
    """Counted: the calls that run a default config where the table lacks them. Qwen2.5-0.5B's four run the
    skinny kernels up to 32 rows; at batch 1 a call the table lacks runs inductor's kernels (skinny_batch_1
    auto), unless the setting is on."""
    from accelerate_graph import settings

    shapes = layer_shapes("qwen2.5-0.5b")
    whole = coverage_of(shapes, (1, 8, 32), GPU, "model")
    assert (whole.held, whole.calls) == (0, 8) and not any("|m1|" in key for key in whole.missing)
    table.merge_into(
        configs.user_table_path(GPU), {key: SkinnyConfig(16, 256) for key in whole.missing[:4]}, GPU, VERSIONS
    )
    configs.forget_tables()
    found = coverage_of(shapes, (1, 8, 32), GPU, "model")
    assert (found.held, found.calls, found.missing) == (4, 8, whole.missing[4:])
    assert coverage_of(shapes, (2, 3, 5), GPU, "model").calls == 4  # 2-5 rows: the 8-row bucket's keys
    with settings.use(settings.DEFAULTS.replace(skinny_batch_1="on")):
        assert coverage_of(shapes, (1,), GPU, "model").calls == 4
    eight = layer_shapes("llama-3.1-8b")  # its calls run cuBLAS above batch 1: nothing to count
    assert coverage_of(eight, (8, 32), GPU, "model").calls == 0


def test_an_fp8_checkpoint_is_counted_by_its_block_keys():
    shapes = dataclasses.replace(layer_shapes("llama-3.2-1b"), fp8_block=128)
    found = coverage_of(shapes, (1,), GPU, "model")
    assert found.table == "fp8_tuning_table" and all(key.startswith("fp8_block") for key in found.missing)


def test_layers_that_do_not_run_the_skinny_kernels_have_no_coverage():
    assert table_coverage("olmoe-1b-7b", None, (1, 8), H100, "fp8") is None  # an MoE layer


def test_the_bench_header_says_what_the_table_lacks():
    from cli.bench_tables import tuning_table_line

    found = fp8_skinny.table_in_use(H100).as_dict()
    assert tuning_table_line(found, "none").startswith("shipped ") and "holds" not in tuning_table_line(found, "none")
    found["covers"] = table_coverage("qwen2.5-0.5b", None, (1, 8, 32), H100, "fp8").as_dict()
    line = tuning_table_line(found, "none", "tune MODEL --weights fp8")
    assert "it holds 0 of this model's 12 layer products" in line and "tune MODEL --weights fp8" in line
    found["covers"] = table_coverage("llama-3.1-8b", None, (1, 8, 32), H100, "fp8").as_dict()
    assert "holds" not in tuning_table_line(found, "none")


def test_the_bench_notes_the_coverage_in_the_serving_tables_entry(monkeypatch):
    """bench.environment.note_table_coverage, as a run on an H100 calls it (no CUDA needed: only the name)."""
    import torch

    from accelerate_graph.bench.environment import note_table_coverage

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: H100)
    info = {"tuning_table": {"origin": "none"}, "fp8_tuning_table": fp8_skinny.table_in_use(H100).as_dict()}
    note_table_coverage(info, torch.device("cuda", 0), "qwen2.5-0.5b", None, (1, 8, 32), "fp8")
    assert info["fp8_tuning_table"]["covers"]["held"] == 0 and "covers" not in info["tuning_table"]
    note_table_coverage(info, torch.device("cuda", 0), "llama-3.2-1b", None, (1, 8, 32), "model")
    assert (info["tuning_table"]["covers"]["held"], info["tuning_table"]["covers"]["calls"]) == (0, 4)  # o, down
    cpu = {"tuning_table": {"origin": "none"}}
    note_table_coverage(cpu, torch.device("cpu"), "llama-3.2-1b", None, (1,), "model")
    assert cpu == {"tuning_table": {"origin": "none"}}  # no table serves the CPU


def test_a_coverage_that_cannot_be_read_leaves_the_benchmark_alone(monkeypatch):
    import torch

    from accelerate_graph.bench import environment
    from accelerate_graph.tune import coverage

    def broken(*args):
        raise KeyError("an exotic config")

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: H100)
    monkeypatch.setattr(coverage, "table_coverage", broken)
    info = {"tuning_table": {"origin": "none"}}
    environment.note_table_coverage(info, torch.device("cuda", 0), "llama-3.2-1b", None, (8,), "model")
    assert info == {"tuning_table": {"origin": "none"}}


def test_without_a_bf16_table_the_header_says_which_products_run_default_configs():
    """On the H100 (no bf16 table), Qwen2.5-0.5B's four products run the skinny kernels at 8 and 32 rows with the
    default configs; the 8B's run cuBLAS there, and batch 1 runs inductor's kernels."""
    from cli.bench_tables import tuning_table_line

    none = configs.table_in_use(H100).as_dict()
    assert none["origin"] == "none" and tuning_table_line(none) == "none: the fused step uses inductor's kernels"
    small = {**none, "covers": table_coverage("qwen2.5-0.5b", None, (1, 8, 32), H100, "model").as_dict()}
    assert tuning_table_line(small).startswith("none: inductor's kernels at batch 1; 8 of this model's layer")
    eight = {**none, "covers": table_coverage("llama-3.1-8b", None, (1, 8, 32), H100, "model").as_dict()}
    assert tuning_table_line(eight) == "none: the fused step uses inductor's kernels"
