"""`cugraph-accel tune`: MODEL's shapes read without its weights, one-line refusals off a GPU and for bad
input, and (on a GPU) a table written that a second process reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from accelerate_graph.common.errors import USAGE_EXIT, UnsupportedModelError
from accelerate_graph.fused.kernels import configs
from accelerate_graph.tune.model_shapes import ORDER, layer_shapes
from cli.errors import DEBUG_ENV
from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={DEBUG_ENV: None})


def one_error_line(result, code: int) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_recipes_shapes_are_the_keys_the_shipped_table_has():
    shapes = layer_shapes("qwen2.5-0.5b")
    assert tuple(shapes.calls) == ORDER and shapes.hidden == 896 and shapes.biases == {"qkv"}
    assert shapes.calls["qkv"] == ("proj", (1152,), 896) and shapes.calls["down"] == ("residual", (896,), 4864)
    shipped = configs.read_table(configs.shipped_table_path("NVIDIA H200"))
    for bucket in configs.M_BUCKETS:
        assert all(configs.table_key(kind, bucket, ns, k) in shipped for kind, ns, k in shapes.calls.values())


def test_a_model_whose_layers_do_not_run_the_skinny_kernels_is_refused(tiny_model_dir):
    with pytest.raises(UnsupportedModelError, match="nothing to tune"):
        layer_shapes(tiny_model_dir("gpt2"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal")
def test_tune_refuses_on_the_cpu_in_one_line():
    line = one_error_line(invoke("tune", "tiny", "--budget-s", "1"), USAGE_EXIT)
    assert "CUDA GPU" in line


def test_the_help_states_the_default_budget_without_importing_torch():
    from accelerate_graph.tune.run import DEFAULT_BUDGET_S
    from cli.tune_cmd import DEFAULT_BUDGET_S as SHOWN

    assert SHOWN == DEFAULT_BUDGET_S


def test_tune_refuses_buckets_the_table_does_not_keep():
    line = one_error_line(invoke("tune", "tiny", "--buckets", "1,4"), USAGE_EXIT)
    assert "1,8,16,32" in line
    line = one_error_line(invoke("tune", "tiny", "--buckets", "one"), USAGE_EXIT)
    assert "--buckets item 'one' is not a whole number" in line and "--buckets 1,8,16,32" in line


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tune_writes_the_table_a_second_process_reads(tiny_model_dir, tmp_path):
    """A tiny budget at 8 rows (written whatever inductor's time): the table for this GPU under the cache folder,
    named by a fresh process."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "tune", tiny_model_dir("llama"), "--buckets", "8", "--budget-s", "5",
         "--json", str(tmp_path / "tune.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "tune.json").read_text(encoding="utf-8"))
    name = torch.cuda.get_device_name()
    path = tmp_path / "cache" / "cugraph-accel" / "tuning" / configs.table_file_name(name)
    assert report["device"] == name and report["table"] == str(path)
    (bucket,) = report["buckets"]
    assert bucket["rows"] == 8 and bucket["written"] and len(bucket["chosen"]) == 4  # a key an op
    assert bucket["chosen_us_per_layer"] > 0 and bucket["inductor_us_per_layer"] > 0
    assert configs.read_table(path) == {key: configs.SkinnyConfig(**f) for key, f in bucket["chosen"].items()}
    read_back = subprocess.run(
        [sys.executable, "-c", "from accelerate_graph.fused.kernels import configs; "
         "import json; print(json.dumps(configs.table_in_use().as_dict()))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert read_back.returncode == 0, read_back.stderr
    assert json.loads(read_back.stdout.splitlines()[-1])["path"] == str(path)


def test_tunes_help_shows_examples_and_the_json_option():
    result = invoke("tune", "--help")
    assert result.exit_code == 0 and "Examples" in result.stdout and "cugraph-accel tune" in result.stdout
    assert "--json" in result.stdout and "--budget-s" in result.stdout and "--out" in result.stdout


def test_tune_refuses_buckets_the_tables_do_not_keep_and_unknown_weights():
    line = one_error_line(invoke("tune", "tiny", "--weights", "fp8", "--buckets", "1,64"), USAGE_EXIT)
    assert "1,8,16,32 rows only" in line and "--buckets" in line
    line = one_error_line(invoke("tune", "tiny", "--weights", "fp4"), USAGE_EXIT)
    assert "--weights fp4 is not one of model, fp8, fp8-block" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal")
def test_tune_with_fp8_weights_refuses_on_the_cpu_in_one_line():
    line = one_error_line(invoke("tune", "tiny", "--weights", "fp8-block", "--budget-s", "1"), USAGE_EXIT)
    assert "CUDA GPU" in line


def test_an_fp8_checkpoint_is_tuned_with_its_own_block_scales_alone(tiny_model_dir, tmp_path):
    """Its layers are FP8 with the checkpoint's blocks whatever is asked: --weights fp8-block tunes them at that
    block; model and fp8 are refused in one line."""
    from accelerate_graph.tune.run import fp8_block_for

    config = json.loads((Path(tiny_model_dir("llama")) / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [64, 64],
    }
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    shapes = layer_shapes(str(tmp_path))
    assert shapes.fp8_block == 64 and shapes.calls == layer_shapes(tiny_model_dir("llama")).calls
    assert fp8_block_for(shapes, "fp8-block") == 64
    for weights in ("model", "fp8"):
        with pytest.raises(UnsupportedModelError, match="is an FP8 checkpoint") as raised:
            fp8_block_for(shapes, weights)
        assert "fp8-block" in raised.value.hint
    plain = layer_shapes(tiny_model_dir("llama"))
    assert [fp8_block_for(plain, w) for w in ("model", "fp8", "fp8-block")] == [None, None, 128]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tune_fp8_writes_the_fp8_table_a_second_process_reads(tiny_model_dir, tmp_path):
    """A tiny budget at 8 rows, FP8 block scales: the FP8 table for this GPU under the cache folder, its configs
    what config_for returns in a fresh process; the skinny kernels' table untouched."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "tune", tiny_model_dir("llama"), "--weights", "fp8-block", "--buckets", "8",
         "--budget-s", "20", "--json", str(tmp_path / "tune.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "tune.json").read_text(encoding="utf-8"))
    from accelerate_graph.quant import fp8_skinny

    name = torch.cuda.get_device_name()
    folder = tmp_path / "cache" / "cugraph-accel" / "tuning"
    path = folder / fp8_skinny.table_file_name(name)
    assert report["device"] == name and report["table"] == str(path) and report["weights"] == "fp8-block"
    (bucket,) = report["buckets"]
    assert bucket["rows"] == 8 and bucket["written"] and bucket["inductor_us_per_layer"] is None
    # the folded gate/up projection has keys of its own (its epilogue is another kernel)
    assert bucket["chosen"] and all(key.split("|")[:2] in (["fp8_block", "m8"], ["fp8_block_gate_up", "m8"])
                                    for key in bucket["chosen"])  # fmt: skip
    assert any(key.startswith("fp8_block_gate_up|") for key in bucket["chosen"])
    assert not bucket["wrong"] and not bucket["unchecked"], bucket
    assert configs.read_table(path) == {key: configs.SkinnyConfig(**f) for key, f in bucket["chosen"].items()}
    assert not (folder / configs.table_file_name(name)).exists()
    shapes = {key: tuple(int(part[1:]) for part in key.split("|")[2:]) for key in bucket["chosen"]}
    script = (
        "import dataclasses, json, sys, torch; from accelerate_graph.quant import fp8_skinny; "
        "shapes = json.loads(sys.argv[1]); device = torch.device('cuda'); "
        "print(json.dumps({key: dataclasses.asdict(fp8_skinny.config_for(6, n, k, 128, device, "
        "gate_up=key.startswith('fp8_block_gate_up|'))) for key, (n, k) in shapes.items()}))"
    )
    read_back = subprocess.run(
        [sys.executable, "-c", script, json.dumps(shapes)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert read_back.returncode == 0, read_back.stderr
    assert json.loads(read_back.stdout.splitlines()[-1]) == bucket["chosen"]  # 6 rows: the 8-row bucket
