"""The training package on a micro scale: a deterministic corpus split by file, a byte-level tokenizer, a few
steps of each architecture's loop lowering the loss, and the command's bad-input lines (no real training)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.training import evaluation
from accelerate_graph.training.__main__ import main
from accelerate_graph.training.corpus import load_corpus
from accelerate_graph.training.loop import build_model, train
from accelerate_graph.training.model_specs import SPECS, find_spec
from accelerate_graph.training.tokenizer import token_stream, train_tokenizer

MICRO_BYTES = 60_000
MICRO_VOCAB = 320  # the 256 byte symbols, three specials and some merges
MICRO = {  # each trained spec's architecture, shrunk
    "tiny": dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
    ),
    "qwen2-moe-small": dict(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        num_experts=4, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
    ),
    "gemma2-sliding": dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, query_pre_attn_scalar=8, sliding_window=16,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def micro():
    corpus = load_corpus(MICRO_BYTES)
    tokenizer = train_tokenizer(corpus.train, MICRO_VOCAB, chat=True)
    return corpus, tokenizer, token_stream(tokenizer, corpus.train), token_stream(tokenizer, corpus.held_out)


def test_the_corpus_is_deterministic_and_split_by_whole_files(micro):
    corpus = micro[0]
    again = load_corpus(MICRO_BYTES)
    assert again.sha256 == corpus.sha256 and again.train_files == corpus.train_files
    assert not set(corpus.train_files) & set(corpus.held_out_files)
    assert MICRO_BYTES <= corpus.train_bytes and corpus.held_out_bytes > 0
    assert corpus.describe()["python"] == corpus.python


def test_the_tokenizer_is_deterministic_and_round_trips_any_text(micro):
    corpus, tokenizer = micro[:2]
    again = train_tokenizer(corpus.train, MICRO_VOCAB, chat=True)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    text = corpus.held_out[0][:2000] + " ünïcode ✓ \x00"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert len(tokenizer) == MICRO_VOCAB


def micro_spec(name: str):
    spec = find_spec(name)
    return dataclasses.replace(
        spec, config={**spec.config, **MICRO[name]}, vocab_size=MICRO_VOCAB, context=32, batch=8, lr=1e-2,
        warmup_steps=2,
    )  # fmt: skip


def loss_before_and_after(micro, name: str, device: torch.device, steps: int = 30) -> tuple[float, float]:
    _, tokenizer, train_ids, held_ids = micro
    spec = micro_spec(name)
    model = build_model(spec, tokenizer, device)
    windows = evaluation.held_out_windows(held_ids, spec.context, 2048)
    before = evaluation.model_loss(model, windows, device)
    result = train(model, train_ids, spec, device, steps=steps, budget_s=60, log=lambda _: None)
    assert result.steps == steps and result.stopped_by == "steps" and len(result.losses) == steps
    return before, evaluation.model_loss(model, windows, device)


@pytest.mark.parametrize("name", list(MICRO))
def test_a_few_steps_lower_the_loss(micro, name):
    torch.set_num_threads(1)
    before, after = loss_before_and_after(micro, name, torch.device("cpu"))
    assert after < before - 0.5, (before, after)


def test_unigram_loss_is_add_one_smoothed_training_frequencies():
    counts = torch.tensor([3, 1])  # smoothed: 4/6 and 2/6
    expected = -(2 * math.log(4 / 6) + math.log(2 / 6)) / 3
    assert evaluation.unigram_loss(counts, torch.tensor([0, 0, 1])) == pytest.approx(expected)
    assert evaluation.unigram_counts(torch.tensor([0, 0, 2]), 4).tolist() == [2, 0, 1, 0]


def test_every_spec_is_named_and_the_gpu_ones_have_a_budget():
    assert set(MICRO) <= set(SPECS) and "llama-gqa-100m" in SPECS
    for spec in SPECS.values():
        assert spec.steps is not None or (spec.device == "cuda" and 0 < spec.budget_s <= 120)
    gemma = SPECS["gemma2-sliding"]
    assert gemma.config["sliding_window"] < gemma.context and gemma.config["final_logit_softcapping"]
    with pytest.raises(BadOptionError, match="no trainable model"):
        find_spec("nope")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["nope", "--out", "x"], "no trainable model named 'nope'"),
        (["tiny"], "give a model NAME and --out DIR"),
        (["tiny", "--out", "x", "--steps", "0"], "--steps must be positive"),
        (["tiny", "--out", "x", "--device", "tpu"], "is not cpu or cuda"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
    assert not (tmp_path / "x").exists()
