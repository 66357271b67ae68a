"""A byte-level BPE tokenizer trained on the corpus, saved as a PreTrainedTokenizerFast.

Byte-level: every byte sequence encodes, so any prompt works; the special tokens take the first ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)  # ids 0, 1, 2
# Plain-text turns: the models are not instruction-tuned; the template lets `generate` take chat prompts.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def train_tokenizer(texts: Sequence[str], vocab_size: int, chat: bool):
    """A byte-level BPE of `vocab_size` ids (specials included) trained on `texts`, deterministically."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, clean_up_tokenization_spaces=False
    )
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def token_stream(tokenizer, texts: Sequence[str]) -> torch.Tensor:
    """All texts as one int64 stream, each file followed by EOS (the models learn where a file ends)."""
    eos = tokenizer.convert_tokens_to_ids(EOS)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    flat = [token for ids in encoded for token in (*ids, eos)]
    return torch.tensor(flat, dtype=torch.int64)
