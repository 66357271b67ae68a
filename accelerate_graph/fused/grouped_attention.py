"""Decode attention for grouped-query models without repeating K/V: `--attn grouped`.

HF's sdpa path repeats each K/V head for every query head that shares it whenever a mask is given
(always, with a static cache), so each decode step writes and reads the cache `heads / kv_heads`
times over (7x for Qwen2.5's 14/2). For one query token the grouped form is two batched matmuls:
the query heads of a group become rows of one matmul against their shared K/V head. Steps with more
than one token (the prompt) and features this form does not cover fall back to HF's sdpa, except in a
model that softcaps attention logits (Gemma-2): sdpa ignores the softcap, so such a model is loaded with
eager attention (models/loading.py), grouped attention stands in for that, and its matmul form, which
applies the softcap, serves the prompt too.

With the triton_attention setting on (the default), a CUDA decode step runs one Triton kernel instead (fused/kernels/
decode_attention.py: K/V read once per group, masked blocks skipped, softcapping too); the matmul path
stays the fallback and the reference its numerics are tested against.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import AttentionInterface

from accelerate_graph.compat.transformers_internals import attention_implementations, attention_softcap
from accelerate_graph.settings import current

GROUPED = "cugraph_grouped"  # the name of our attention in AttentionInterface and the model's config
_UNSUPPORTED = ("s_aux", "sinks", "head_mask")  # kwargs that ask for more than softmax(softcapped qk)v

# The Triton decode kernel is on by default since the H200 measured it (2026-12-01): the 8B's fused step
# 4.969 -> 4.806-4.871 ms at batch 8, 5.495 -> 5.213-5.296 at 32; triton_attention off keeps the matmuls.
_TRITON = importlib.util.find_spec("triton") is not None
# Under the Triton interpreter (CPU tests) the kernel runs on CPU tensors too.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _asks_for_more(module, dropout, kwargs) -> bool:
    """Whether the call asks for more than this attention computes: an _UNSUPPORTED kwarg, or dropout in training."""
    return any(kwargs.get(name) is not None for name in _UNSUPPORTED) or bool(module.training and dropout)


def _triton_decode(module, query, key, value, attention_mask, dropout, scaling, kwargs):
    """The Triton kernel's output [b, 1, Hq, d], or None where it does not apply."""
    if not (current().triton_attention and _TRITON and (query.is_cuda or _INTERPRETED)):
        return None
    if _asks_for_more(module, dropout, kwargs):
        return None
    from accelerate_graph.fused.kernels import decode_attention as kernel  # imports triton: only when asked for

    if not kernel.supports(query, key, value, attention_mask):
        return None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    softcap = kwargs.get("softcap") or 0.0
    return torch.ops.cugraph_accel.decode_attention(query, key, value, attention_mask, float(scale), float(softcap))


def grouped_decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """query [b, Hq, q, d], key/value [b, Hkv, L, d], mask [b, 1|Hq, q, L] (bool: attend) or additive.
    Returns [b, q, Hq, d] like HF's attention functions, and no weights."""
    out = _triton_decode(module, query, key, value, attention_mask, dropout, scaling, kwargs)
    if out is not None:
        return out, None
    heads, q_len = query.shape[1], query.shape[2]
    if (
        (q_len != 1 and not kwargs.get("softcap"))
        or heads % key.shape[1]
        or key.shape[-1] != value.shape[-1]
        or _asks_for_more(module, dropout, kwargs)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    return _matmul_attention(query, key, value, attention_mask, scaling, kwargs.get("softcap")), None


def _matmul_attention(query, key, value, attention_mask, scaling, softcap) -> torch.Tensor:
    """softmax(q k^T * scale [softcapped] + mask) v with the query heads of a group as rows of one matmul
    against their shared K/V head: [b, q, Hq, d]. No mask means causal (HF passes none where sdpa's
    is_causal would do)."""
    batch, heads, q_len, head_dim = query.shape
    kv_heads, length = key.shape[1], key.shape[-2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else head_dim**-0.5
    rows = query.reshape(batch, kv_heads, group * q_len, head_dim)  # a group's heads (and tokens) are rows
    scores = torch.matmul(rows, key.transpose(-1, -2)).float() * scale  # [b, Hkv, g * q, L]
    if softcap:  # HF's eager attention's softcap * tanh(s / softcap); sdpa has none
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(batch, kv_heads, group, q_len, length)
    if attention_mask is None and q_len > 1:
        attention_mask = torch.ones(q_len, length, dtype=torch.bool, device=query.device).tril(length - q_len)
        attention_mask = attention_mask.view(1, 1, q_len, length)
    if attention_mask is not None:
        mask = attention_mask[:, :, -q_len:, :length]  # [b|1, 1|Hq, q, L]
        mask = mask.unsqueeze(2) if mask.shape[1] == 1 else mask.reshape(mask.shape[0], kv_heads, group, q_len, -1)
        if mask.dtype == torch.bool:  # the lowest float, not -inf: a row with no key left gives no NaN
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask.float()
    probs = torch.softmax(scores, dim=-1).to(value.dtype).view(batch, kv_heads, group * q_len, length)
    out = torch.matmul(probs, value)  # [b, Hkv, g * q, d]
    return out.view(batch, heads, q_len, head_dim).transpose(1, 2)


def register() -> None:
    AttentionInterface.register(GROUPED, grouped_decode_attention)
    AttentionMaskInterface.register(GROUPED, sdpa_mask)


def switch_attention(model: torch.nn.Module, old: str, new: str) -> Callable[[], None]:
    """Every config of the model (its own and its sub-configs: text, vision, decoder, ...) using attention
    `old` now uses `new`, through HF's set_attn_implementation. Returns what switches them back."""
    switched = [key for key, implementation in attention_implementations(model).items() if implementation == old]
    if not switched:
        return lambda: None
    model.set_attn_implementation(dict.fromkeys(switched, new))  # "" is the model's own config
    return lambda: model.set_attn_implementation(dict.fromkeys(switched, old))


def stands_in_for(model: torch.nn.Module) -> str:
    """The HF attention grouped attention replaces in `model`: eager where the model softcaps attention
    logits (sdpa would ignore the softcap, so the loader gives such a model eager), else sdpa."""
    return "eager" if attention_softcap(model.config) else "sdpa"


def use_grouped_attention(model: torch.nn.Module) -> Callable[[], None]:
    """Switch a model loaded with the attention grouped attention stands in for (`stands_in_for`) to the
    grouped decode attention. Returns what switches it back."""
    register()
    return switch_attention(model, stands_in_for(model), GROUPED)


@contextmanager
def hf_attention(model: torch.nn.Module) -> Iterator[None]:
    """HF's own attention (sdpa, or eager for a softcapping model) for the duration, where grouped attention
    was switched on: the reference `verify` compares replays against is the model as loaded, not ours."""
    undo = switch_attention(model, GROUPED, stands_in_for(model))
    try:
        yield
    finally:
        undo()
