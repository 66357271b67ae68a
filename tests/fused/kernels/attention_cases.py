"""Decode-attention inputs shaped as fused mode sees them, and a float32 reference: shared by the
interpreter worker (CPU) and the GPU tests."""

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Attention(torch.nn.Module):
    """What HF passes as `module`: only `training` is read."""


def inputs(case: dict, device: str = "cpu"):
    """Query, K/V views sliced out of a larger cache, the mask as HF gives it, and the rows that attend."""
    gen = torch.Generator().manual_seed(case.get("seed", 0))
    b, hq, hkv, d, length = case["b"], case["hq"], case["hkv"], case["d"], case["L"]
    dtype = DTYPES[case.get("dtype", "float32")]
    cache = torch.randn(2, b + 2, hkv, length + 9, d, generator=gen).to(device, dtype)  # [K|V, B, Hkv, S, d]
    key, value = cache[0, 1 : b + 1, :, :length], cache[1, 1 : b + 1, :, :length]
    query = torch.randn(b, hq, 1, d, generator=gen).to(device, dtype)
    slots = torch.arange(length + 5)  # the mask may be longer than the context bucket: slots past it are noise
    now = length - case.get("tail", 3)  # the current token's slot; slots after it are empty
    real = torch.randint(1, now + 2, (b,), generator=gen)  # left padding: each row's real length
    keep = (slots >= now + 1 - real[:, None]) & (slots <= now)
    if "window" in case:
        keep &= slots > now - case["window"]
    keep[:, length:] = True  # past the context bucket: must never be read
    if case.get("dead_row") is not None:
        keep[case["dead_row"]] = False  # a padded row of a batch bucket: nothing to attend
    mask = keep[:, None, None, :]
    if case.get("per_head"):
        per_head = torch.rand(b, hq, 1, length + 5, generator=gen) > 0.3
        mask = mask & per_head
        mask[..., now] = True
    if case.get("batch_broadcast"):
        mask = mask[:1]
    if case["mask"] == "additive":  # HF's additive form: 0 or the dtype's lowest value
        mask = torch.where(mask, 0.0, torch.finfo(dtype).min).to(dtype)
    elif case["mask"] == "none":
        mask = None
    return query, key, value, None if mask is None else mask.to(device)


def reference(query, key, value, mask, scale: float, softcap: float) -> torch.Tensor:
    """float32 attention with K/V repeated per query head (no grouping, no online softmax): [b, 1, Hq, d]."""
    groups = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(groups, dim=1)
    v = value.float().repeat_interleave(groups, dim=1)
    scores = query.float() @ k.transpose(-1, -2) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        rows = mask[:, :, -1:, : key.shape[2]]
        scores = scores.masked_fill(~rows, float("-inf")) if rows.dtype == torch.bool else scores + rows.float()
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)
