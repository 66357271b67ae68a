"""`cugraph-accel generate` end to end on the CPU emulation, and its bad-input contract."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.generate.loop import check_fits
from accelerate_graph.generate.prompts import collect_prompts, parse_input_ids, read_prompts_file
from accelerate_graph.generate.sampling import Sampler, Sampling
from cli.errors import DEBUG_ENV
from cli.main import app

runner = CliRunner()
SMALL = ["--buckets", "1,2", "--max-cache-len", "48", "--device", "cpu"]


def invoke(*args):
    return runner.invoke(app, ["generate", *map(str, args)], env={DEBUG_ENV: None})


def one_error_line(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_text_prompts_stream_and_json_matches_hf(tokenized_model_dir, tmp_path):
    folder = tokenized_model_dir("llama")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w1 w2 w3 w4"}\n\n"w9"\n{"input_ids": [30, 31]}\n')
    report = tmp_path / "out.json"
    result = invoke(folder, "--prompts", prompts, "--max-new-tokens", 6, "--json", report, *SMALL)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert [len(o["token_ids"]) <= 6 for o in data["outputs"]] == [True] * 3
    assert data["outputs"][0]["prompt_ids"] == [4, 5, 6, 7] and data["outputs"][2]["prompt_ids"] == [30, 31]
    assert set(data["step_ms"]) == {"p50", "p90", "p99"} and data["time_to_first_token_s"] > 0
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    ids = torch.tensor([[12]])  # "w9" alone (ids 0-2 are special); EOS as the model's generation config says
    hf = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert data["outputs"][1]["prompt_ids"] == [12]
    first = data["outputs"][1]["token_ids"]
    assert first == hf[0, 1 : 1 + len(first)].tolist()
    assert data["outputs"][0]["text"] is not None


def test_single_prompt_streams_its_text(tokenized_model_dir):
    result = invoke(tokenized_model_dir("llama"), "--prompt", "w3 w4", "--max-new-tokens", 5, *SMALL)
    assert result.exit_code == 0, result.output
    assert "new tokens in" in result.output and " w" in result.output


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--prompt", ""], ["prompt 1 is empty"]),
        (["--prompt", "w1", "--temperature", "-1"], ["--temperature -1.0"]),
        (["--prompt", "w1", "--temperature", "0.5", "--top-p", "1.5"], ["--top-p 1.5"]),
        (["--prompt", "w1", "--top-k", "5"], ["--top-k and --top-p only apply when sampling"]),
        (["--prompt", "w1", "--max-new-tokens", "60"], ["--max-new-tokens 60", "cache holds 48"]),
        (["--prompt", " ".join(["w1"] * 50)], ["prompt 1", "50 tokens", "48 slots"]),
        ([], ["exactly one of --prompt"]),
        (["--input-ids", "1,x"], ["--input-ids 1,x is not a list of token ids"]),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(tokenized_model_dir, tmp_path, args, needles):
    report = tmp_path / "out.json"
    result = invoke(tokenized_model_dir("llama"), *args, "--json", report, *SMALL)
    one_error_line(result, *needles)
    assert not report.exists()


def test_invalid_jsonl_names_the_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('"fine"\n{"prompt": "ok"}\n{not json\n')
    with pytest.raises(BadOptionError, match="line 3 is not valid JSON"):
        read_prompts_file(bad)
    bad.write_text('"fine"\n{"input_ids": [1, -2]}\n')
    with pytest.raises(BadOptionError, match="line 2: input_ids"):
        read_prompts_file(bad)
    bad.write_text("\n\n")
    with pytest.raises(BadOptionError, match="holds no prompt"):
        read_prompts_file(bad)


def test_model_without_tokenizer_takes_input_ids(tiny_model_dir):
    folder = tiny_model_dir("gpt2")
    result = invoke(folder, "--prompt", "hello", *SMALL)
    one_error_line(result, "has no tokenizer", "--input-ids")
    result = invoke(folder, "--input-ids", "3,4,5", "--input-ids", "9", "--max-new-tokens", 4, *SMALL)
    assert result.exit_code == 0, result.output


def test_prompt_helpers():
    assert parse_input_ids("1, 2 3") == [1, 2, 3]
    assert collect_prompts(None, None, ["1,2"]) == [[1, 2]]
    with pytest.raises(BadOptionError, match="exactly one"):
        collect_prompts(["a"], None, ["1"])
    check_fits(10, 39, 48)
    with pytest.raises(
        BadOptionError, match="needs 49 cache slots; the cache holds 47. Lower max_new_tokens to at most 38"
    ):
        check_fits(10, 40, 47)


def test_sampling_stays_on_the_device_and_respects_top_k_and_seed():
    logits = torch.randn(64, 50)
    sampler = Sampler(Sampling(temperature=1.0, top_k=3, seed=7), torch.device("cpu"))
    picked = sampler(logits)
    top3 = logits.topk(3, dim=-1).indices
    assert (picked[:, None] == top3).any(-1).all()
    again = Sampler(Sampling(temperature=1.0, top_k=3, seed=7), torch.device("cpu"))(logits)
    assert torch.equal(picked, again)
    nucleus = Sampler(Sampling(temperature=1.0, top_p=1e-6, seed=1), torch.device("cpu"))(logits)
    assert torch.equal(nucleus, logits.argmax(-1))  # the top token alone holds the smallest mass p
    assert torch.equal(Sampler(Sampling(), torch.device("cpu"))(logits), logits.argmax(-1))


def test_a_plan_from_capture_is_reused(tmp_path):
    plan = tmp_path / "tiny.plan.yaml"
    captured = runner.invoke(
        app,
        [
            "capture",
            "tiny",
            "--buckets",
            "1,2",
            "--max-cache-len",
            "48",
            "--context-buckets",
            "full",
            "--plan",
            str(plan),
        ],
        env={DEBUG_ENV: None},
    )
    assert captured.exit_code == 0, captured.output
    report = tmp_path / "out.json"
    result = invoke(
        "--plan",
        plan,
        "--input-ids",
        "3,4,5",
        "--input-ids",
        "7",
        "--input-ids",
        "9,9",
        "--max-new-tokens",
        5,
        "--json",
        report,
    )
    assert result.exit_code == 0, result.output
    assert "re-capturing from plan" in result.output
    data = json.loads(report.read_text())
    assert [len(o["token_ids"]) for o in data["outputs"]] == [5, 5, 5]  # three prompts: chunks of bucket 2
