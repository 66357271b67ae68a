"""`cugraph-accel bench` driven as a user would, through typer's CliRunner, on the CPU (--allow-cpu).

Bad options must fail before any model is loaded (a missing model folder would otherwise be the
error), with exit code 2 and one `error:` line naming the value.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.errors import DEBUG_ENV
from cli.main import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={DEBUG_ENV: None, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})


def succeeded(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def error_line(result, code: int, *phrases: str) -> str:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, f"exit {result.exit_code}, wanted {code}:\n{result.output}"
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    for phrase in phrases:
        assert phrase.lower() in lines[0].lower(), f"{phrase!r} not in {lines[0]!r}"
    return lines[0]


def test_bench_tiny_eager_vs_graph_writes_json_and_csv(tmp_path):
    json_path, csv_path = tmp_path / "x.json", tmp_path / "y.csv"
    result = invoke(
        "bench",
        "tiny",
        "--allow-cpu",
        "--compare",
        "eager,graph",
        "--steps",
        5,
        "--warmup",
        1,
        "--json",
        json_path,
        "--csv",
        csv_path,
    )
    succeeded(result)
    assert "benchmark environment" in result.stdout and "x floor" in result.stdout
    report = json.loads(json_path.read_text())
    pairs = [(r["bucket"], r["contender"]) for r in report["rows"]]
    assert pairs == [(b, c) for b in (1, 2, 4, 8) for c in ("eager", "graph")]
    assert all(r["samples"] == 5 and r["x_floor"] > 0 and r["context"] == 256 for r in report["rows"])
    assert report["contexts"][0]["floors"][0]["total_bytes"] > 0
    assert report["environment"]["sm_clock_mhz_start"] == "unknown"  # no GPU: never a failure
    rows = list(csv.DictReader(csv_path.open()))
    assert [(int(r["bucket"]), r["contender"]) for r in rows] == pairs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.csv"]


def test_bench_context_sweep(tmp_path):
    path = tmp_path / "sweep.json"
    succeeded(
        invoke(
            "bench",
            "tiny",
            "--allow-cpu",
            "--buckets",
            "1",
            "--context",
            "64,32",
            "--steps",
            5,
            "--warmup",
            0,
            "--json",
            path,
        )
    )
    report = json.loads(path.read_text())
    assert [(c["cache_len"], c["prompt_len"]) for c in report["contexts"]] == [(32, 16), (64, 16)]
    assert sorted({r["context"] for r in report["rows"]}) == [32, 64]
    kv = {c["cache_len"]: c["floors"][0]["kv_read_bytes"] for c in report["contexts"]}
    # the floor counts the slots a step must attend (a 16-token prompt and itself), whatever the cache length
    assert kv[64] == kv[32] == 2 * 2 * 2 * 32 * 4 * 17  # layers * (K, V) * KV heads * dim * fp32 * slots


def test_bench_eager_plan_can_still_compare_eager(tmp_path):
    plan = tmp_path / "eager.yaml"
    assert (
        invoke("capture", "tiny", "--device", "cpu", "--buckets", "1", "--mode", "eager", "--plan", plan).exit_code == 0
    )
    succeeded(invoke("bench", "--allow-cpu", "--plan", plan, "--compare", "eager", "--steps", 5, "--warmup", 0))
    error_line(invoke("bench", "--allow-cpu", "--plan", plan, "--compare", "eager,graph"), 2, "no graph to time")


@pytest.mark.parametrize(
    "value, phrase",
    [("eager,turbo", "'turbo'"), ("eager,,graph", "empty item"), ("graph,graph", "twice"), ("", "empty item")],
)
def test_bad_compare_fails_before_loading(value, phrase, tmp_path):
    error_line(invoke("bench", tmp_path / "nope", "--allow-cpu", "--compare", value), 2, "--compare", phrase)


@pytest.mark.parametrize(
    "value, phrase",
    [("1", "below 2"), ("128,abc", "'abc'"), ("128,,256", "empty item"), ("64,64", "twice"), ("", "empty item")],
)
def test_bad_context_fails_before_loading(value, phrase, tmp_path):
    error_line(invoke("bench", tmp_path / "nope", "--allow-cpu", "--context", value), 2, "--context", phrase)


def test_unwritable_output_fails_before_loading(tmp_path):
    line = error_line(invoke("bench", tmp_path / "nope", "--allow-cpu", "--csv", tmp_path), 2, "cannot write")
    assert str(tmp_path) in line


def test_plot_without_matplotlib_fails_before_loading(tmp_path, monkeypatch):
    real_import = __import__

    def refuse(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", refuse)
    error_line(
        invoke("bench", tmp_path / "nope", "--allow-cpu", "--plot", tmp_path / "p.png"),
        2,
        "matplotlib",
        "cugraph-accel[plot]",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_bench_every_contender_on_tiny(tmp_path):
    """eager, graph, torch.compile (inductor on the CPU: tens of seconds) and HF generate vs our loop."""
    has_matplotlib = _importable("matplotlib")  # CI has no matplotlib: the plot is then left out
    outputs = {"--json": tmp_path / "b.json", "--csv": tmp_path / "b.csv"}
    if has_matplotlib:
        outputs["--plot"] = tmp_path / "b.png"
    args = [a for pair in outputs.items() for a in pair]
    result = invoke(
        "bench",
        "tiny",
        "--allow-cpu",
        "--buckets",
        "1",
        "--context",
        "32",
        "--compare",
        "eager,graph,compile,hf-generate",
        "--new-tokens",
        3,
        "--steps",
        5,
        "--warmup",
        1,
        *args,
    )
    succeeded(result)
    assert "HF generate" in result.stdout
    rows = json.loads(outputs["--json"].read_text())["rows"]
    # run order: ours first, then torch.compile, then HF generate (their cuBLAS resets break our graphs)
    assert [(r["kind"], r["contender"]) for r in rows] == [
        ("step", "eager"),
        ("step", "graph"),
        ("generate", "our-loop"),
        ("step", "compile"),
        ("generate", "hf-generate"),
    ]
    compiled = rows[3]
    assert compiled["setup_seconds"] > 0 and compiled["speedup"] > 0
    assert all(r["new_tokens"] == 3 for r in rows if r["kind"] == "generate")
    if has_matplotlib:
        assert Path(outputs["--plot"]).read_bytes()[:4] == b"\x89PNG"


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True
