"""`cugraph-accel eval` end to end on the CPU emulation in bf16: a pass with its JSON, and each bad input
refused with one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from accelerate_graph.common.errors import USAGE_EXIT
from cli.main import app

SMALL = ["--dtype", "bfloat16", "--device", "cpu", "--buckets", "1,4", "--max-cache-len", "32"]


def _eval(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


def _one_error_line(result, *words: str) -> str:
    assert result.exit_code == USAGE_EXIT, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert all(word in errors[0] for word in words), errors[0]
    return errors[0]


def test_a_pass_writes_the_measures_and_the_settings(eval_model_dir, eval_text, tmp_path):
    out = tmp_path / "eval.json"
    result = _eval(eval_model_dir, "--text", eval_text, "--windows", "6", *SMALL, "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "graph: pass" in result.output and "float32 reference" in result.output
    data = json.loads(out.read_text())
    assert data["passed"] and data["windows"] == 6 and data["window_len"] == 32
    assert [arm["name"] for arm in data["arms"]] == ["eager", "graph"]
    assert data["arms"][1]["passed"] is True and data["arms"][0]["passed"] is None
    assert data["settings"]["pdl"] is not None and data["bootstrap"]["unit"] == "window"
    assert data["reference"]["steps_a_forward"] == 16 and "16 steps a forward" in result.output


def test_token_ids_serve_a_model_without_a_tokenizer(tiny_model_dir, tmp_path):
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([(7 * i) % 256 for i in range(200)]))
    result = _eval(tiny_model_dir("llama"), "--tokens", str(ids), "--window-len", "16", *SMALL)
    assert result.exit_code == 0, result.output
    assert "12 windows x 16 tokens" in result.output  # 200 ids: 12 whole windows, the rest left out


def test_text_for_a_model_without_a_tokenizer_names_the_way_out(tiny_model_dir, eval_text):
    _one_error_line(_eval(tiny_model_dir("llama"), "--text", eval_text, *SMALL), "no tokenizer", "--tokens")


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", ("is empty",)),
        (b" \n\t\n", ("is empty",)),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", ("binary",)),
        ("caf\u00e9 ol\u00e9".encode("latin-1"), ("not UTF-8", "byte 3")),
    ],
    ids=["empty", "blank", "binary", "latin-1"],
)
def test_a_bad_text_is_refused_before_the_model_loads(tmp_path, content, words):
    path = tmp_path / "text.txt"
    path.write_bytes(content)
    _one_error_line(_eval("no-such-model-is-ever-loaded", "--text", str(path)), *words)


def test_a_text_shorter_than_two_windows_says_how_many_it_holds(eval_model_dir, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("The graph replays a decode step.", encoding="utf-8")
    _one_error_line(_eval(eval_model_dir, "--text", str(path), *SMALL), "0 whole window(s) of 32", "needs 2")


def test_a_window_longer_than_the_cache_is_refused(eval_model_dir, eval_text):
    _one_error_line(_eval(eval_model_dir, "--text", eval_text, "--window-len", "33", *SMALL), "longer than the cache")


def test_more_windows_than_the_text_holds_are_refused(eval_model_dir, eval_text):
    _one_error_line(_eval(eval_model_dir, "--text", eval_text, "--windows", "100000", *SMALL), "needs 100000")


@pytest.mark.parametrize(
    "content, words",
    [("1 2 x 4", ("neither",)), ('{"ids": [1]}', ("neither",)), ("", ("no token id",)), ("[1, 2, 99999]", ("99999",))],
    ids=["word", "json-object", "empty", "outside-vocabulary"],
)
def test_bad_token_ids_are_refused(tiny_model_dir, tmp_path, content, words):
    path = tmp_path / "ids.txt"
    path.write_text(content)
    _one_error_line(_eval(tiny_model_dir("llama"), "--tokens", str(path), *SMALL), *words)


def test_text_and_tokens_together_or_neither_are_refused(eval_text, tmp_path):
    _one_error_line(_eval("tiny"), "exactly one of --text")
    _one_error_line(_eval("tiny", "--text", eval_text, "--tokens", eval_text), "exactly one of --text")


def test_a_missing_text_file_is_refused(tmp_path):
    _one_error_line(_eval("tiny", "--text", str(tmp_path / "absent.txt")), "is not a file")


def test_a_plan_is_recaptured_and_scored(eval_model_dir, eval_text, tmp_path):
    plan = tmp_path / "eval.plan.yaml"
    captured = CliRunner().invoke(app, ["capture", eval_model_dir, *SMALL, "--plan", str(plan)])
    assert captured.exit_code == 0, captured.output
    result = _eval("--plan", str(plan), "--text", eval_text, "--windows", "4", "--window-len", "24")
    assert result.exit_code == 0, result.output
    assert "re-capturing from plan" in result.output and "4 windows x 24 tokens" in result.output


def test_a_failed_gate_exits_3_and_names_the_arm(eval_model_dir, eval_text, tmp_path, monkeypatch):
    from accelerate_graph.eval import runs

    def scaled_graph_arm(name, graphs):  # every replayed logit x 1.01: eager and the reference run without it
        return runs.Arm(name, lambda session, tokens, positions: graphs.run(tokens, positions) * 1.01)

    monkeypatch.setattr(runs, "graph_arm", scaled_graph_arm)
    out = tmp_path / "eval.json"
    result = _eval(eval_model_dir, "--text", eval_text, "--windows", "8", *SMALL, "--json", str(out))
    assert result.exit_code == 3, result.output
    assert "eval failed: graph" in result.output and "Traceback" not in result.output
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["arms"][1]["failures"]
