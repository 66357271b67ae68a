"""Held-out loss (nats per token, perplexity) of a model beside a unigram model's on the same tokens.

The targets are every token of non-overlapping held-out windows but each window's first (it has no context);
the unigram model is the training split's token frequencies, add-one smoothed so no held-out token is
impossible.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def held_out_windows(stream: torch.Tensor, context: int, max_tokens: int) -> torch.Tensor:
    """Non-overlapping windows of `context` tokens from the start of `stream`, at most `max_tokens` in all."""
    count = min(stream.numel(), max_tokens) // context
    if count == 0:
        raise ValueError(f"the held-out text has {stream.numel()} tokens, fewer than one {context}-token window")
    return stream[: count * context].view(count, context)


def unigram_counts(train_stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return torch.bincount(train_stream, minlength=vocab_size)[:vocab_size]


def unigram_loss(counts: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean negative log-likelihood (nats) of `targets` under add-one smoothed `counts`."""
    probs = (counts.double() + 1) / (counts.double().sum() + counts.numel())
    return float(-probs.log()[targets.flatten()].mean())


@torch.no_grad()
def model_loss(model, windows: torch.Tensor, device: torch.device, batch: int = 16) -> float:
    """Mean next-token negative log-likelihood (nats) of the model over every window's targets, in float32."""
    total, count = 0.0, 0
    for start in range(0, windows.shape[0], batch):
        chunk = windows[start : start + batch].to(device)
        logits = model(input_ids=chunk[:, :-1], use_cache=False).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum").item()
        count += chunk[:, 1:].numel()
    return total / count


def loss_record(nats: float) -> dict:
    return {"nats_per_token": round(nats, 4), "perplexity": round(math.exp(nats), 2)}


def compare_with_unigram(model, windows: torch.Tensor, counts: torch.Tensor, device: torch.device) -> dict:
    """The held-out comparison saved in training.json."""
    nats = model_loss(model, windows, device)
    unigram = unigram_loss(counts, windows[:, 1:])
    return {
        "tokens": int(windows[:, 1:].numel()),
        "context": int(windows.shape[1]),
        "model": loss_record(nats),
        "unigram": loss_record(unigram),
        "nats_below_unigram": round(unigram - nats, 4),
    }
