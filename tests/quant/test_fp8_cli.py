"""--weights on the commands, on the trained tiny llama in bf16 under the CPU emulation: a plan captured with
FP8 weights records them and verify replays them and passes; eval --weights fp8 measures an FP8 arm further
from the float32 reference than bf16 eager; each bad combination is one line and a usage exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from accelerate_graph.common.errors import USAGE_EXIT
from cli.main import app

SMALL = ["--dtype", "bf16", "--device", "cpu", "--buckets", "1,2", "--max-cache-len", "32"]


@pytest.fixture(autouse=True)
def own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_error_line(result, *words: str) -> str:
    assert result.exit_code == USAGE_EXIT, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert all(word in result.output for word in words), result.output
    return errors[0]


def test_a_plan_captured_with_fp8_replays_fp8_and_verify_passes(trained_tiny, tmp_path):
    captured = _run("capture", trained_tiny, *SMALL, "--weights", "fp8-block", "--plan", "fp8.plan.yaml")
    assert captured.exit_code == 0, captured.output
    assert "28 linear layers in FP8 e4m3 (a scale per 128 x 128 block)" in captured.output
    assert yaml.safe_load((tmp_path / "fp8.plan.yaml").read_text())["weights"] == "fp8-block"
    out = tmp_path / "verify.json"
    verified = _run("verify", "--plan", "fp8.plan.yaml", "--steps", "2", "--json", str(out))
    assert verified.exit_code == 0, verified.output
    assert "28 linear layers in FP8" in verified.output and json.loads(out.read_text())["passed"] is True
    other = _run("verify", "--plan", "fp8.plan.yaml", "--weights", "fp8")
    _one_error_line(other, "captured with --weights fp8-block, not --weights fp8", "Drop --weights")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--weights", "fp8", "--device", "cpu"], ("FP8 weights multiply bf16 or fp16", "--dtype bf16")),
        (["--weights", "int4", "--dtype", "bf16", "--device", "cpu"], ("--weights int4", "model, fp8, fp8-block")),
        (["--weights", "fp8", "--dtype", "bf16", "--device", "cpu", "--tp", "2"], ("with --tp is not supported",)),
    ],
)
def test_bad_weights_are_one_line(trained_tiny, args, words):
    _one_error_line(_run("capture", trained_tiny, *args), *words)


def test_eval_measures_what_fp8_costs(trained_tiny, tmp_path):
    text = f"{trained_tiny}/held_out_sample.txt"
    out = tmp_path / "eval.json"
    result = _run(
        "eval", trained_tiny, "--text", text, "--windows", "6", *SMALL, "--weights", "fp8", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "what fp8 weights cost" in result.output
    data = json.loads(out.read_text())
    arms = {arm["name"]: arm for arm in data["arms"]}
    assert list(arms) == ["eager", "graph", "fp8"] and data["passed"]  # the FP8 arm is measured, not judged
    assert arms["fp8"]["passed"] is None and arms["graph"]["passed"] is True
    assert arms["fp8"]["kl_mean"]["value"] > arms["eager"]["kl_mean"]["value"] > 0
    assert [row[0] for row in data["cost"]["rows"]] == ["bfloat16 (model)", "fp8"]
    # benchmarks/summary.py's eval table (gpu.sh trained prints it) reads this JSON as eval wrote it
    (tmp_path / "eval-tiny.json").write_text(out.read_text())
    summary = Path(__file__).resolve().parents[2] / "benchmarks" / "summary.py"
    lines = subprocess.run(
        [sys.executable, str(summary), "eval", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[0] == "| model | eager | graph | fp8 |"
    cells = lines[2].split(" | ")
    assert cells[0] == "| tiny" and "[" in cells[1]  # the baseline's interval
    assert cells[2].endswith("%: pass") and cells[3].endswith("% |")  # the FP8 arm measured, not judged
    assert lines[5].startswith("| model | weights | KL mean")
    assert [line.split(" | ")[1] for line in lines[7:]] == ["bfloat16 (model)", "fp8"]
