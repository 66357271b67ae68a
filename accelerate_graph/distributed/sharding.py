"""Split a loaded model across the ranks by transformers' own tensor-parallel plan.

The plan is the config's `base_model_tp_plan` ("layers.*.self_attn.q_proj": "colwise", ...), the one
`from_pretrained(tp_plan="auto")` applies. We apply it ourselves, with plain local tensors and one
all-reduce after each row-wise layer (as vLLM does; NCCL's, or a one-shot kernel: all_reduce.py),
because transformers' own loader needs `accelerate` and, in 5.24, turns parameters into DTensors: its step then depends on the transformers
version, and a DTensor's dispatch hides the collectives from the graph emulation. Plain shards and
`dist.all_reduce` are the same on 5.17 and 5.24, on NCCL inside a CUDA graph and on gloo in the
emulation. Every rank holds the same full weights before the split (same recipe seed, same files),
so rank r keeps slice r of each split dimension.
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

from accelerate_graph.common.errors import UnsupportedModelError, option
from accelerate_graph.distributed import all_reduce

STYLES = ("colwise", "rowwise")  # the styles dense decoders use; anything else is refused by name


def tp_plan(model: torch.nn.Module, reference: str) -> dict[str, str]:
    config = model.config.get_text_config()
    plan = getattr(config, "base_model_tp_plan", None) or {}
    if not plan:
        raise UnsupportedModelError(
            f"{reference} ({config.model_type}) has no tensor-parallel plan (its config has no base_model_tp_plan).",
            "Run it with {tp=1}.",
        )
    return dict(plan)


def check_can_split(model: torch.nn.Module, world: int, reference: str) -> None:
    """A plan, and heads that divide: refused before any weight moves."""
    tp_plan(model, reference)
    check_divisible(model, world, reference)


def check_divisible(model: torch.nn.Module, world: int, reference: str) -> None:
    config = model.config.get_text_config()
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    for count, what in ((heads, "attention heads (num_attention_heads)"), (kv_heads, "KV heads (num_key_value_heads)")):
        if count % world:
            raise UnsupportedModelError(
                f"{option('tp', world)}: {reference} has {count} {what}, which do not split evenly over {world} ranks.",
                f"Use a {option('tp')} that divides {count}.",
            )


def _matches(plan: dict[str, str], base: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str]]:
    """(name, module, style) for every module a plan entry names; '*' stands for a layer number."""
    patterns = [(re.compile(re.escape(key).replace(r"\*", r"\d+")), style) for key, style in plan.items()]
    found = []
    for name, module in base.named_modules():
        style = next((style for pattern, style in patterns if pattern.fullmatch(name)), None)
        if style is not None:
            found.append((name, module, style))
    return found


def _slice(tensor: torch.Tensor, dim: int, rank: int, world: int, where: str) -> torch.Tensor:
    size = tensor.shape[dim]
    if size % world:
        raise UnsupportedModelError(
            f"{option('tp', world)}: {where} has {size} rows along dim {dim}, not divisible by {world}."
        )
    part = size // world
    # A copy of the slice, never a view: a row slice (dim 0) is already contiguous, and a view of it
    # would keep the whole weight's storage alive (the 8B at tp 2 held 12.7 GiB per rank, not 8.0).
    return tensor.narrow(dim, rank * part, part).clone(memory_format=torch.contiguous_format)


def _all_reduce_output(module, args, output):
    output = all_reduce.summed(output)  # recorded inside the CUDA graph, replayed with the step
    if module.tp_bias is not None:
        output = output + module.tp_bias  # added once, after the sum of the partial products
    return output


def _split_linear(name: str, module: torch.nn.Module, style: str, rank: int, world: int) -> None:
    if not isinstance(module, torch.nn.Linear):
        raise UnsupportedModelError(
            f"tensor-parallel style {style!r} on {name} ({type(module).__name__}) is not supported.",
            "Run it with {tp=1}.",
        )
    weight = module.weight
    if style == "colwise":
        module.weight = torch.nn.Parameter(_slice(weight.data, 0, rank, world, name), requires_grad=False)
        if module.bias is not None:
            module.bias = torch.nn.Parameter(_slice(module.bias.data, 0, rank, world, name), requires_grad=False)
        module.out_features = module.weight.shape[0]
        return
    module.weight = torch.nn.Parameter(_slice(weight.data, 1, rank, world, name), requires_grad=False)
    module.in_features = module.weight.shape[1]
    module.tp_bias = module.bias  # the bias joins after the all-reduce, not on every rank's part
    module.bias = None
    module.register_forward_hook(_all_reduce_output)


# torch 2.13 renamed all_gather_into_tensor (now a FutureWarning on every call) to all_gather_single;
# 2.11 has only the first. Both public, the same c10d op underneath.
_all_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _gather_columns(module, args, output):
    """Each rank computed its slice of the vocabulary: gather them in rank order (inside the graph)."""
    world = dist.get_world_size()
    parts = output.new_empty((world * output.shape[0], *output.shape[1:]))  # gloo takes only this layout
    _all_gather_into(parts, output.contiguous())
    return parts.view(world, *output.shape).movedim(0, -2).reshape(*output.shape[:-1], world * output.shape[-1])


def _split_lm_head(model: torch.nn.Module, rank: int, world: int) -> bool:
    """The LM head split by vocabulary rows and its logits gathered (transformers' class-level plan
    for it: colwise with gathered output), unless it shares its weight with the input embedding or
    the vocabulary does not divide: then every rank keeps the whole head."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if not isinstance(head, torch.nn.Linear) or head.bias is not None or head.out_features % world:
        return False
    if embed is not None and head.weight.data_ptr() == embed.weight.data_ptr():
        return False
    head.weight = torch.nn.Parameter(_slice(head.weight.data, 0, rank, world, "lm_head"), requires_grad=False)
    head.out_features = head.weight.shape[0]
    head.register_forward_hook(_gather_columns)
    return True


def share_rank0_weights(model: torch.nn.Module) -> None:
    """Random weights drawn on each rank from one seed agree only if every device's generator does:
    rank 0's copy is sent to all, so the split (and verify's single-device reference) starts from
    one model."""
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)


def shard_model(model: torch.nn.Module, rank: int, world: int, reference: str, reduce: str = "nccl") -> dict:
    """Split `model` in place for `rank` of `world`, its row-wise layers summed over the ranks by the
    `reduce` kind of all-reduce (distributed.all_reduce); returns this rank's layout for the plan."""
    check_can_split(model, world, reference)
    plan = tp_plan(model, reference)
    targets = _matches(plan, model.base_model)
    unsupported = sorted({style for _, _, style in targets} - set(STYLES))
    if unsupported:
        raise UnsupportedModelError(
            f"{reference}'s tensor-parallel plan uses style {unsupported[0]!r}, which {option('tp')} does not implement "
            f"(only {', '.join(STYLES)}).",
            "Run it with {tp=1}.",
        )
    weight = next(model.parameters())
    kind = all_reduce.set_up(reduce, weight.device, weight.dtype)
    for name, module, style in targets:
        _split_linear(name, module, style, rank, world)
    head_split = _split_lm_head(model, rank, world)
    config = model.config.get_text_config()
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    return {
        "rank": rank,
        "split_layers": len(targets) + head_split,
        "lm_head": "split" if head_split else "whole",
        "attention_heads": heads // world,
        "kv_heads": kv_heads // world,
        "all_reduce": kind,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }
