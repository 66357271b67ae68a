"""The training loop: random windows of the token stream, AdamW, warm-up then cosine decay.

Seeded windows and a fixed step count make a CPU run repeat its loss curve; a GPU run trains for a time
budget (bf16 autocast, fused AdamW), its schedule following the time spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from accelerate_graph.training.model_specs import ModelSpec

ROUTER_AUX_WEIGHT = 0.01  # keeps the experts in use; the held-out loss measured is the LM loss alone
MIN_LR_SHARE = 0.1


def say(line: str) -> None:
    print(line, flush=True)  # progress shows in a log file as it happens


@dataclass
class TrainResult:
    steps: int
    seconds: float
    tokens: int
    stopped_by: str  # "steps" or "budget"
    losses: list[float] = field(default_factory=list)  # the training loss of every step


def build_model(spec: ModelSpec, tokenizer, device: torch.device):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        spec.model_type,
        vocab_size=spec.vocab_size,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **spec.config,
    )
    torch.manual_seed(spec.seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=spec.attn)


def learning_rate(spec: ModelSpec, step: int, progress: float) -> float:
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return spec.lr * (MIN_LR_SHARE + (1 - MIN_LR_SHARE) * cosine)


def sample_windows(stream: torch.Tensor, context: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, stream.numel() - context - 1, (batch,), generator=generator)
    return torch.stack([stream[start : start + context + 1] for start in starts.tolist()])


def _is_moe(model) -> bool:
    return any(hasattr(model.config, name) for name in ("num_experts", "num_local_experts"))


def train(
    model,
    stream: torch.Tensor,
    spec: ModelSpec,
    device: torch.device,
    steps: int | None,
    budget_s: float,
    log: Callable[[str], None] = say,
) -> TrainResult:
    """Train `model` in place on windows of `stream`; stops after `steps` (when given) or `budget_s` seconds."""
    cuda = device.type == "cuda"
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay, fused=cuda
    )
    generator = torch.Generator().manual_seed(spec.seed)
    moe = _is_moe(model)
    model.train()
    result = TrainResult(steps=0, seconds=0.0, tokens=0, stopped_by="steps")
    began = time.perf_counter()
    every = max((steps or 1000) // 20, 1)
    while True:
        elapsed = time.perf_counter() - began
        if steps is not None and result.steps >= steps:
            break
        if elapsed >= budget_s:
            result.stopped_by = "budget"
            break
        progress = result.steps / steps if steps is not None else elapsed / budget_s
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(spec, result.steps, progress)
        window = sample_windows(stream, spec.context, spec.batch, generator).to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            extra = {"output_router_logits": True} if moe else {}
            out = model(input_ids=window[:, :-1], use_cache=False, **extra)
            loss = F.cross_entropy(out.logits.float().flatten(0, 1), window[:, 1:].flatten())
            total = loss + ROUTER_AUX_WEIGHT * out.aux_loss if getattr(out, "aux_loss", None) is not None else loss
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        result.losses.append(round(loss.item(), 4))
        result.steps += 1
        result.tokens += window[:, 1:].numel()
        if result.steps % every == 0 or result.steps == 1:
            log(f"step {result.steps}: loss {result.losses[-1]:.3f} ({time.perf_counter() - began:.0f} s)")
    result.seconds = round(time.perf_counter() - began, 1)
    model.eval()
    return result
