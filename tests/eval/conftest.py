"""The model `eval` is tested on: a folder with weights and a tokenizer, as users give it.

A tiny random llama with wider initial weights than HF's default, so that its next-token distributions
are peaked enough for bf16 rounding, a 1% logit scale and a skewed rotary angle to show in KL; its
tokenizer is a byte-level BPE trained here on the test text. A trained tiny model with its own tokenizer
can replace it by changing `eval_model_dir` alone.
"""

from __future__ import annotations

import random

import pytest
import torch
from tiny_models import TINY_CONFIGS
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

WORDS = (
    "the graph replays a decode step while the cache holds every key and value of the text so far and each "
    "token reads them back through attention before the head turns a hidden state into logits over the "
    "vocabulary model weights stay fixed rows are padded up to a bucket and a context bucket limits the slots"
).split()


def sample_text(words: int, seed: int = 0) -> str:
    """Sentences of the test vocabulary: repetitive enough for a tiny BPE, varied enough to score."""
    chooser = random.Random(seed)
    sentences, count = [], 0
    while count < words:
        length = chooser.randint(6, 14)
        sentences.append(" ".join(chooser.choice(WORDS) for _ in range(length)).capitalize() + ".")
        count += length
    return " ".join(sentences)


def _train_tokenizer(text: str, vocab: int) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<s>"]
    )
    tokenizer.train_from_iterator([text], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>")


@pytest.fixture(scope="session")
def eval_model_dir(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("eval-llama")
    config = dict(TINY_CONFIGS["llama"], initializer_range=0.2, vocab_size=320)
    tokenizer = _train_tokenizer(sample_text(3000, seed=1), config["vocab_size"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def eval_text(tmp_path_factory) -> str:
    """A text file of a few thousand tokens for the eval model."""
    path = tmp_path_factory.mktemp("eval-text") / "text.txt"
    path.write_text(sample_text(2000, seed=2), encoding="utf-8")
    return str(path)


@pytest.fixture(autouse=True)
def one_thread():
    """Two torch threads on a shared two-core machine spin against each other (a tiny linear: 25 ms)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
