"""Tiny models with a tiny word-level tokenizer saved next to them, for `generate` tests."""

from __future__ import annotations

import pytest
from tiny_models import save_tiny_model

WORDS = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(253)]  # 256 ids: the tiny models' vocab


def save_tiny_tokenizer(folder) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="session")
def tokenized_model_dir(tmp_path_factory):
    """model_type -> a saved tiny model folder with a tokenizer (built once per session)."""
    made: dict[str, str] = {}

    def get(model_type: str) -> str:
        if model_type not in made:
            folder = save_tiny_model(model_type, tmp_path_factory.mktemp(f"tok-{model_type}"))
            save_tiny_tokenizer(folder)
            made[model_type] = folder
        return made[model_type]

    return get
