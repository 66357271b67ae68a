"""Greedy agreement (eval/agreement.py) on the trained tiny llama: in float32 our graphs' greedy text is HF's,
token for token; in bf16 the three pairs are measured and written; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
import torch

from accelerate_graph.eval.agreement import compare, held_out_prompts, main, run_agreement
from accelerate_graph.generate.prompts import load_tokenizer


@pytest.fixture(scope="module")
def prompts(eval_model_dir, eval_text):
    with open(eval_text, encoding="utf-8") as file:
        return held_out_prompts(file.read(), load_tokenizer(eval_model_dir), 3, 16)


def test_compare_counts_equal_positions_and_the_common_prefix():
    pair = compare([[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 9, 4], [5, 6, 7, 8]], ("a", "b"))
    assert pair.token_share == 7 / 8 and pair.mean_prefix == (2 + 4) / 2 and pair.identical_rows == 1
    short = compare([[1, 2]], [[1, 2, 3, 4]], ("a", "b"))  # a row cut short: its missing tokens differ
    assert short.token_share == 2 / 4 and short.mean_prefix == 2 and short.identical_rows == 0


def test_prompts_are_spread_windows_of_one_length(eval_model_dir, eval_text, prompts):
    assert len(prompts) == 3 and {len(p) for p in prompts} == {16} and prompts[0] != prompts[1]


def test_in_float32_our_greedy_text_is_hfs_token_for_token(eval_model_dir, prompts):
    report = run_agreement(eval_model_dir, prompts, 12, torch.float32)
    assert [(p["first"], p["second"]) for p in report["pairs"]] == [("graphs-fp32", "hf-fp32")]
    pair = report["pairs"][0]
    assert pair["token_share"] == 1.0 and pair["mean_prefix"] == 12 and pair["identical_rows"] == 3
    assert report["arms"]["graphs-fp32"]["token_ids"] == report["arms"]["hf-fp32"]["token_ids"]


def test_bf16_reports_the_three_pairs_as_a_table_and_json(eval_model_dir, tmp_path, capsys):
    out = tmp_path / "agreement.json"
    argv = [eval_model_dir, "--prompts", "2", "--new-tokens", "8", "--prompt-len", "16", "--device", "cpu"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    names = [(p["first"], p["second"]) for p in report["pairs"]]
    assert names == [("graphs-bf16", "hf-bf16"), ("hf-bf16", "hf-fp32"), ("graphs-bf16", "hf-fp32")]
    for pair in report["pairs"]:
        assert 0 <= pair["token_share"] <= 1 and 0 <= pair["mean_prefix"] <= 8
    assert all(len(row) == 8 for arm in report["arms"].values() for row in arm["token_ids"])
    printed = capsys.readouterr().out
    assert "hf-bf16 vs hf-fp32" in printed and "tokens equal" in printed


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--prompts", "0"], "--prompts 0 must be at least 1"),
        (["--new-tokens", "1"], "--new-tokens 1 leaves no decode step"),
        (["--dtype", "int8"], "--dtype int8 is not one of"),
        (["--prompts", "4000"], "too few for 4000 prompts"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(eval_model_dir, capsys, extra, message):
    assert main([eval_model_dir, "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_graph_and_fused_arms_run_in_bf16(eval_model_dir, prompts):
    report = run_agreement(eval_model_dir, prompts, 16, torch.bfloat16, "cuda", fuse=True)
    ours = ("graphs-bf16", "fused-bf16")
    expected = [(name, "hf-bf16") for name in ours] + [("hf-bf16", "hf-fp32")] + [(name, "hf-fp32") for name in ours]
    assert [(p["first"], p["second"]) for p in report["pairs"]] == expected
    assert all(len(row) == 16 for arm in report["arms"].values() for row in arm["token_ids"])
