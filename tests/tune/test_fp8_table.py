"""The FP8 kernel's table as `tune --weights fp8` writes it: merged like the skinny kernels' table, read again
after forget_tables in this process and by config_for in a new one, and named by the bench header when the
weights are FP8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.quant import fp8_skinny
from accelerate_graph.tune import table

ROOT = Path(__file__).resolve().parents[2]
GPU = "Test GPU"
VERSIONS = {"torch": "2.13.0", "triton": "3.9.0"}
TUNED = SkinnyConfig(32, 128, 4, 5, split_k=2, dot=True)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test with an empty user cache folder and tables read afresh (before and after)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fp8_skinny.forget_tables()
    yield
    fp8_skinny.forget_tables()


def test_the_fp8_table_is_the_users_beside_the_skinny_ones():
    assert fp8_skinny.user_table_path(GPU) == configs.user_tables_dir() / "fp8-Test_GPU.json"
    assert fp8_skinny.user_table_path(GPU).parent == configs.user_table_path(GPU).parent
    assert fp8_skinny.table_in_use(GPU).origin == "none"


def test_a_written_table_serves_after_forget_tables_and_in_a_new_process():
    path = fp8_skinny.user_table_path(GPU)
    key = fp8_skinny.table_key(128, 5, 4096, 14336)  # 5 rows: the 8-row bucket
    assert key == "fp8_block|m8|n4096|k14336"
    default = fp8_skinny.default_config(5, 4096, 14336)
    assert fp8_skinny.config_named(GPU, 5, 4096, 14336, 128) == default  # read once: no table yet
    assert table.merge_into(path, {key: TUNED}, GPU, VERSIONS) == (1, 0)
    assert fp8_skinny.config_named(GPU, 5, 4096, 14336, 128) == default  # read once a process, until told
    fp8_skinny.forget_tables()
    assert fp8_skinny.config_named(GPU, 5, 4096, 14336, 128) == TUNED
    assert fp8_skinny.config_named(GPU, 5, 4096, 14336, None) == fp8_skinny.default_config(5, 4096, 14336)
    assert fp8_skinny.config_named(GPU, 16, 4096, 14336, 128) == fp8_skinny.default_config(16, 4096, 14336)
    found = fp8_skinny.table_in_use(GPU)
    assert (found.origin, found.path) == ("user", path)
    script = (
        "import dataclasses, json; from accelerate_graph.quant import fp8_skinny; "
        f"print(json.dumps(dataclasses.asdict(fp8_skinny.config_named({GPU!r}, 8, 4096, 14336, 128))))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert SkinnyConfig(**json.loads(done.stdout.splitlines()[-1])) == TUNED


def test_a_second_tune_merges_into_the_fp8_table():
    path = fp8_skinny.user_table_path(GPU)
    one, other = fp8_skinny.table_key(None, 1, 896, 896), fp8_skinny.table_key(None, 8, 896, 896)
    table.merge_into(path, {one: SkinnyConfig(16, 512, 4, 2)}, GPU, VERSIONS)
    ahead = SkinnyConfig(8, 512, 4, 1, lookahead=True)
    assert table.merge_into(path, {other: TUNED, one: ahead}, GPU, VERSIONS) == (1, 1)
    assert configs.read_table(path) == {one: ahead, other: TUNED}


def test_the_bench_header_names_the_fp8_table_when_the_weights_are_fp8():
    from accelerate_graph.bench.floor import Bandwidth
    from accelerate_graph.bench.results import BenchReport
    from cli.bench_tables import environment_table

    bandwidth = Bandwidth(4e12, 2**28, 5, "copy")
    table.merge_into(fp8_skinny.user_table_path(GPU), {fp8_skinny.table_key(None, 1, 64, 64): TUNED}, GPU, VERSIONS)
    env = {"gpu": GPU, "tuning_table": {"origin": "none"}, "fp8_tuning_table": fp8_skinny.table_in_use(GPU).as_dict()}
    lines = {}
    described = {  # bf16, quantized here, and a fine-grained FP8 checkpoint loaded as it is
        "model": {"weights": "model", "fp8_layers": None},
        "fp8": {"weights": "fp8", "fp8_layers": "fp8"},
        "checkpoint": {"weights": "model", "fp8_layers": "fp8-block"},
    }
    for name, weights in described.items():
        report = BenchReport(env, bandwidth, {**weights, "buckets": "1"})
        rendered = environment_table(report)
        lines[name] = dict(zip(rendered.columns[0].cells, rendered.columns[1].cells))
    assert "FP8 tuning table" not in lines["model"] and "weights" not in lines["model"]["model"]
    assert lines["fp8"]["FP8 tuning table"] == f"user {fp8_skinny.user_table_path(GPU)}"
    assert lines["checkpoint"]["FP8 tuning table"] == lines["fp8"]["FP8 tuning table"]
    assert "weights fp8-block (the checkpoint's)" in lines["checkpoint"]["model"]
    env["fp8_tuning_table"] = fp8_skinny.table_in_use("Other GPU").as_dict()
    report = BenchReport(env, bandwidth, {"weights": "fp8-block", "buckets": "1"})
    rendered = environment_table(report)
    shown = dict(zip(rendered.columns[0].cells, rendered.columns[1].cells))
    assert "default configs" in shown["FP8 tuning table"] and "--weights fp8" in shown["FP8 tuning table"]
