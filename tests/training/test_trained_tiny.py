"""The committed trained tiny Llama (tests/assets/trained-tiny-llama, made by
`python -m accelerate_graph.training tiny --out DIR`): it loads as a trained folder, it is measurably better
than a unigram model on held-out text, and the engine's capture, verify and generate hold on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from accelerate_graph.models.loading import load_model
from accelerate_graph.training import evaluation, save
from cli.errors import DEBUG_ENV
from cli.main import app

FOLDER = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"
CLEARLY = 0.5  # nats per token below the unigram model: far beyond what a few steps of training give
PROMPT = "class Reader:\n    def __init__(self, path):\n        self."
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={DEBUG_ENV: None})


@pytest.fixture(scope="module")
def loaded():
    return load_model(str(FOLDER), torch.device("cpu"), torch.float32, "sdpa", None)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(FOLDER)


def test_it_loads_through_the_loading_path_as_a_trained_llama_with_gqa(loaded):
    assert loaded.kind == "folder" and not loaded.random_weights and loaded.initialised == []
    config = loaded.model.config
    assert config.model_type == "llama" and config.num_key_value_heads < config.num_attention_heads
    assert sum(p.numel() for p in loaded.model.parameters()) < 2_000_000
    assert sum(f.stat().st_size for f in FOLDER.iterdir()) < 3_500_000  # small enough to stay in the repository


def test_the_tokenizer_is_byte_level_bpe_with_specials_and_a_chat_template(tokenizer, loaded):
    text = "x = {'a': 1}  # naïve ✓\n\tpass\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: any text round-trips
    assert len(tokenizer) == loaded.model.config.vocab_size
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert loaded.model.generation_config.eos_token_id == tokenizer.eos_token_id
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|assistant|>\n")


def test_its_report_says_it_beats_unigram_clearly_on_held_out_files():
    report = save.read_report(FOLDER)
    held = report["held_out"]
    assert held["tokens"] >= 16_000 and report["corpus"]["held_out_files"] >= 1
    assert held["unigram"]["nats_per_token"] - held["model"]["nats_per_token"] >= CLEARLY
    assert held["nats_below_unigram"] == pytest.approx(
        held["unigram"]["nats_per_token"] - held["model"]["nats_per_token"], abs=1e-3
    )
    curve = report["training"]["loss_curve"]
    assert len(curve) == report["training"]["steps"] and min(curve[-20:]) < curve[0] - 2


def test_the_claim_holds_when_measured_again_on_the_saved_held_out_text(loaded, tokenizer):
    sample = (FOLDER / save.HELD_OUT_SAMPLE).read_text()
    ids = torch.tensor(tokenizer(sample, add_special_tokens=False)["input_ids"])
    windows = evaluation.held_out_windows(ids, 128, 4096)
    counts = torch.tensor(json.loads((FOLDER / save.UNIGRAM).read_text()))
    nats = evaluation.model_loss(loaded.model, windows, torch.device("cpu"))
    assert evaluation.unigram_loss(counts, windows[:, 1:]) - nats >= CLEARLY


def test_capture_and_verify_pass_on_it(tmp_path):
    plan = tmp_path / "trained.plan.yaml"
    small = ["--buckets", "1,2", "--max-cache-len", "64", "--device", "cpu"]
    captured = invoke("capture", FOLDER, *small, "--context-buckets", "full", "--plan", plan)
    assert captured.exit_code == 0, captured.output
    verified = invoke("verify", "--plan", plan, "--steps", "6", "--json", tmp_path / "verify.json")
    assert verified.exit_code == 0, verified.output
    data = json.loads((tmp_path / "verify.json").read_text())
    assert data["passed"] is True and len(data["rows"]) >= 2  # a row per bucket: the graphs were replayed


def test_greedy_generate_equals_hf_generate_on_a_text_prompt(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM

    report = tmp_path / "out.json"
    new = 24
    result = invoke(
        "generate", FOLDER, "--prompt", PROMPT, "--max-new-tokens", new, "--buckets", "1",
        "--max-cache-len", "96", "--device", "cpu", "--dtype", "float32", "--json", report,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ours = json.loads(report.read_text())["outputs"][0]
    model = AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32, attn_implementation="sdpa").eval()
    ids = torch.tensor([tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    assert ours["prompt_ids"] == ids[0].tolist()
    hf = model.generate(input_ids=ids, max_new_tokens=new, do_sample=False)[0, ids.shape[1] :].tolist()
    assert ours["token_ids"] == hf[: len(ours["token_ids"])] and len(ours["token_ids"]) >= 8
    assert len(set(hf)) > 3  # a trained model's greedy text is not one token repeated
