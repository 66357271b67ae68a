"""Fused mode (`capture --fuse`): the decode step compiled by inductor, without inductor's own CUDA
graphs, then captured by us like any other step: same buckets, shared pool, plan and `verify`.

Inductor fuses the step's ~1,200 small kernels into ~520 (measured on the H200). One compilation
serves every graph: the batch and context dimensions are marked dynamic (the batch one unbacked, so
size 1 is not special-cased; a spare cache slot keeps every cache view's strides alike), so the first
capture compiles and the rest reuse its kernels. Inductor's caches live in a folder next to the plan
(TORCHINDUCTOR_CACHE_DIR), so `verify` and `bench` in a new process reuse its compiled kernels
(dynamo's tracing still runs again).
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

from .compiled_step import recompile_headroom

# Freezing folds the weights into constants, which lets inductor merge the q/k/v and the gate/up
# projections into one matmul each (3 fewer per layer, 72 per step for Qwen2.5-0.5B; the merge was
# seen on the CPU), at the cost of a second copy of the merged weights. Off until measured on a GPU:
# the fused numbers in docs/PERF.md were taken without it.
FREEZE = False


def inductor_options() -> dict:
    return {"triton.cudagraphs": False, "freezing": FREEZE}  # our graphs, not inductor's


def inductor_cache_dir(plan_path: Path | str) -> Path:
    """`my.plan.yaml` -> `my.plan.inductor/`: compiled kernels kept beside the plan they serve."""
    path = Path(plan_path)
    return path.with_name(path.name.removesuffix(".yaml").removesuffix(".yml") + ".inductor")


def use_cache_dir(folder: Path | str | None) -> None:
    """Point inductor (and triton under it) at `folder`; must happen before the first compilation."""
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(folder).resolve())


def _mark_dynamic(tensor: torch.Tensor, *dims: int) -> None:
    for dim in dims:
        torch._dynamo.maybe_mark_dynamic(tensor, dim)


def _mark_batch(tensor: torch.Tensor) -> None:
    """The batch dimension as an unbacked size: a backed one is specialised at 1 (a copy's overlap
    check guards `2 <= batch`), which would make batch 1 a second compilation."""
    torch._dynamo.decorators.mark_unbacked(tensor, 0)


def _fresh_views(cache):
    """The same cache over new tensor objects of the same memory (the write position is shared)."""
    fresh = copy.copy(cache)
    fresh.layers = []
    for layer in cache.layers:
        clone = copy.copy(layer)
        clone.keys, clone.values = layer.keys[:], layer.values[:]
        fresh.layers.append(clone)
    return fresh


class FusedForward:
    """Calls the model through inductor; counts the time and graphs spent compiling."""

    def __init__(self, model: torch.nn.Module, backend: str = "inductor"):
        self.backend = backend
        self.compiled = torch.compile(model, backend=backend, dynamic=None)
        self.compile_seconds = 0.0
        self.graphs = 0  # FX graphs dynamo made (more than one: graph breaks or recompilations)

    def _settings(self):
        """Inductor's settings for our compilation only. Patched around the call, not passed as
        torch.compile(options=...): freezing is decided before those options apply (with torch 2.13
        the weights stayed graph inputs and no projection was merged)."""
        if self.backend != "inductor":
            return contextlib.nullcontext()
        return inductor_config.patch(inductor_options())

    def __call__(self, *, input_ids, position_ids, attention_mask, **kwargs):
        # Dynamo reads its size marks from the tensor objects: mark fresh views, never the session's
        # own buffers and cache views, which the torch.compile contender later compiles with static shapes.
        input_ids, position_ids, attention_mask = (t[:] for t in (input_ids, position_ids, attention_mask))
        for tensor in (input_ids, position_ids, attention_mask):
            _mark_batch(tensor)
        _mark_dynamic(attention_mask, 1)  # [b, C]
        name = next(k for k in kwargs if k in ("cache", "past_key_values"))
        kwargs[name] = _fresh_views(kwargs[name])
        for layer in kwargs[name].layers:
            _mark_batch(layer.keys)  # [b, H, C, d]
            _mark_batch(layer.values)
            _mark_dynamic(layer.keys, 2)
            _mark_dynamic(layer.values, 2)
        before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        # every batch and context bucket reuses the graph compiled for the first (the largest)
        with recompile_headroom(64), torch.no_grad(), self._settings():
            out = self.compiled(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, **kwargs)
        made = counters["stats"]["unique_graphs"] - before
        if made:
            self.graphs += made
            self.compile_seconds += time.perf_counter() - start
        return out
