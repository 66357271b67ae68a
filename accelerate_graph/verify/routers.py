"""Mixture-of-experts routers: what each one chose in an eager run, and how close each choice was.

A router picks the top k of its logits per token: a discrete decision, so two numerically equivalent
runs choose different experts wherever the k-th and (k+1)-th logits are closer than their rounding
noise, and the token's hidden state then differs by far more than rounding. Such a decision is a
near-tie, not a fault. This module records the router logits of eager runs (hooks: a graph replay
runs no Python, so a replay's own decisions cannot be read) and finds the near-ties of the reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class Router:
    path: str
    top_k: int
    decoder_layer: int | None  # the index in the module path (model.layers.3.mlp.gate -> 3)


def _top_k(module: torch.nn.Module, config) -> int | None:
    for source in (module, config):
        for name in ("top_k", "num_experts_per_tok", "moe_top_k", "moe_k"):
            value = getattr(source, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def find_routers(model: torch.nn.Module) -> list[Router]:
    """Router modules: a class named *Router*, or a `gate` beside an `experts` module (older MoE blocks)."""
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    found = []
    parents = dict(model.named_modules())
    for path, module in model.named_modules():
        parent = parents.get(path.rpartition(".")[0])
        is_router = "router" in type(module).__name__.lower() or (
            path.endswith(".gate") and parent is not None and hasattr(parent, "experts")
        )
        k = _top_k(module, text) if is_router else None
        if k is not None:
            index = re.search(r"\.(\d+)\.", f".{path}.")
            found.append(Router(path, k, int(index.group(1)) if index else None))
    return found


def _logits_of(output) -> torch.Tensor | None:
    """The router logits among a router's outputs: the first floating tensor."""
    for value in output if isinstance(output, tuple | list) else (output,):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
    return None


@dataclass
class RouterLog:
    """Router logits [tokens, experts] per router, one entry per decode step."""

    routers: list[Router]
    logits: list[list[torch.Tensor]] = field(default_factory=list)  # [router][step]

    def stacked(self, router: int) -> torch.Tensor:
        """[steps, rows, experts]."""
        return torch.stack(self.logits[router])

    def split_steps(self, rows: int, forwards: int) -> None:
        """The calls of `forwards` forwards of several tokens a row (rows first, as the MoE blocks flatten
        [b, t]), each router called as often in each, as the entries one-token steps would have logged."""
        for router, calls in enumerate(self.logits):
            per_forward = max(len(calls) // forwards, 1)
            steps = []
            for begin in range(0, len(calls), per_forward):
                parts = [call.reshape(rows, -1, call.shape[-1]) for call in calls[begin : begin + per_forward]]
                steps += [part[:, step] for step in range(parts[0].shape[1]) for part in parts]
            self.logits[router] = steps


@contextmanager
def recording(model: torch.nn.Module, routers: list[Router]) -> Iterator[RouterLog]:
    log = RouterLog(routers, [[] for _ in routers])
    handles = []
    for i, router in enumerate(routers):

        def keep(module, args, output, _i=i):
            logits = _logits_of(output)
            if logits is not None:
                log.logits[_i].append(logits.detach().float().reshape(-1, logits.shape[-1]).clone())

        handles.append(model.get_submodule(router.path).register_forward_hook(keep))
    try:
        yield log
    finally:
        for handle in handles:
            handle.remove()


def chosen(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The experts chosen per token, as a sorted index set [..., k]."""
    return logits.topk(k, dim=-1).indices.sort(dim=-1).values


def margins(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The gap between the k-th and (k+1)-th largest logit per token: how far the choice is from a tie."""
    top = logits.topk(min(k + 1, logits.shape[-1]), dim=-1).values
    if top.shape[-1] <= k:  # every expert chosen: no decision to flip
        return torch.full_like(top[..., 0], float("inf"))
    return top[..., k - 1] - top[..., k]


@dataclass
class RouterReport:
    """Near-ties of the reference per (step, router, row), and how eager's own decisions compare."""

    routers: list[Router]
    near_tie: torch.Tensor  # bool [steps, routers, rows]
    noise: list[float]  # per router: the median over tokens of the largest |eager - reference| router logit
    eager_flips: int = 0  # (step, router, row) where eager chose other experts than the reference
    eager_flips_accepted: int = 0  # ... at a near-tie
    eager_flip_rows: int = 0  # rows in which eager chose other experts than the reference at least once
    # per (step, router, row): the chance that noise of the replay's allowed size (factor x eager's typical
    # router-logit error) reverses the reference's choice there
    flip_chance: torch.Tensor | None = None

    def expected_flip_rows(self) -> tuple[float, float]:
        """Mean and variance of the number of rows in which such noise flips at least one router."""
        if self.flip_chance is None:
            return 0.0, 0.0
        row = 1 - (1 - self.flip_chance.double()).flatten(0, 1).prod(dim=0)
        return row.sum().item(), (row * (1 - row)).sum().item()

    def tie_in_row_before(self, row: int, step: int, layer: int | None = None) -> bool:
        """A near-tie in `row` at or before `step`, in a router that feeds `layer` (routers of earlier
        decoder layers; None: any router)."""
        feeds = [
            i for i, r in enumerate(self.routers) if layer is None or r.decoder_layer is None or r.decoder_layer < layer
        ]
        return bool(feeds) and bool(self.near_tie[: step + 1, feeds, row].any())


def _one_call_per_step(reference: RouterLog, eager: RouterLog, i: int) -> bool:
    """A router judged only where both runs saw it once per step with one shape (a router called in
    other ways is left out rather than misread)."""
    calls = reference.logits[i]
    return bool(calls) and len(calls) == len(eager.logits[i]) and len({c.shape for c in calls + eager.logits[i]}) == 1


def compare_routers(reference: RouterLog, eager: RouterLog, factor: float, dtype: torch.dtype) -> RouterReport | None:
    """The near-ties of `reference`: a margin within `2 * factor` times the router's noise (how far
    eager's router logits typically are from the reference's: each of the two logits may move by it, a
    replay by `factor` times more), plus the dtype's rounding of the largest logit."""
    usable = [i for i in range(len(reference.routers)) if _one_call_per_step(reference, eager, i)]
    if not usable:
        return None
    routers, ties, chances, noise, flips, accepted, flip_rows = [], [], [], [], 0, 0, None
    for i in usable:
        router = reference.routers[i]
        routers.append(router)
        ref = reference.stacked(i)
        eag = eager.stacked(i)
        # NaN/Inf router logits (the logits' own check names them) are no near-tie and no flip: every
        # comparison with NaN is false, so they are left out explicitly rather than by accident
        finite = torch.isfinite(ref).all(-1) & torch.isfinite(eag).all(-1)
        # the typical token's distance: a router downstream of a flip sees a different token, not noise
        distance = (eag - ref).abs().amax(-1)[finite]
        router_noise = distance.median().item() if distance.numel() else 0.0
        largest = ref[finite].abs().max().item() if finite.any() else 0.0
        limit = 2 * factor * router_noise + torch.finfo(dtype).eps * largest
        margin = margins(ref, router.top_k)
        tie = (margin <= limit) & finite
        # the two logits either side of the choice each move by factor x eager's typical rms error
        token_rms = (eag - ref).pow(2).mean(-1).sqrt()[finite]
        spread = 2 * factor * (token_rms.median().item() if token_rms.numel() else 0.0)
        chance = 0.5 * torch.special.erfc(margin.double() / spread) if spread > 0 else torch.zeros_like(margin)
        chances.append(torch.where(finite, chance.float(), 0.0))
        flipped = (chosen(eag, router.top_k) != chosen(ref, router.top_k)).any(-1) & finite
        flips += int(flipped.sum())
        flip_rows = flipped.any(0) if flip_rows is None else flip_rows | flipped.any(0)
        accepted += int((flipped & tie).sum())
        ties.append(tie)
        noise.append(router_noise)
    return RouterReport(
        routers, torch.stack(ties, dim=1), noise, flips, accepted, int(flip_rows.sum()), torch.stack(chances, dim=1)
    )
