"""NaN and Inf: every comparison with NaN is false, so each rule of the criterion would pass them. Here they
are judged first and on their own: a replay value that is not finite where the float32 reference's is
fails the case, and a non-finite value in eager or the reference (bad weights, a dtype that overflows)
is an error, not a verdict: nothing can be judged against it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph.common.errors import NonFiniteError

GraphAt = Callable[[int], str]  # step index -> the graph that ran it, e.g. "graph (bucket 4, context 16)"


def _kinds(values: torch.Tensor) -> str:
    """`values` (all non-finite) in words: "NaN", "+Inf", "NaN and -Inf"."""
    names = []
    if torch.isnan(values).any():
        names.append("NaN")
    if (values == float("inf")).any():
        names.append("+Inf")
    if (values == float("-inf")).any():
        names.append("-Inf")
    return " and ".join(names)


def all_finite(logits: torch.Tensor, cache: list) -> bool:
    """Whether every logit and K/V is finite, with one device sync: a sum is finite only where each summand is.
    A sum that overflows reads as not finite: the callers' exact search then finds nothing."""
    tensors = [logits, *(tensor for layer in cache for tensor in layer)]
    return bool(torch.isfinite(torch.stack([tensor.sum(dtype=torch.float32) for tensor in tensors])).all())


def _first(bad: torch.Tensor) -> list[int]:
    return bad.nonzero()[0].tolist()


def _where(step: int, graph_at: GraphAt | None) -> str:
    return f"{graph_at(step)}, " if graph_at is not None else ""


def replay_failures(
    replay_logits: torch.Tensor,
    reference_logits: torch.Tensor,
    replay_cache: list,
    reference_cache: list,
    graph_at: GraphAt | None = None,
) -> list[str]:
    """The first non-finite logit and the first non-finite cache value of the replay where the reference
    is finite, each as one line naming the graph, step, row and tensor. Logits are [steps, rows, vocab];
    the cache is (K, V) per layer, [rows, heads, steps, dim]: slot i of the window was written at step i."""
    if all_finite(replay_logits, replay_cache):
        return []
    failures = []
    bad = ~torch.isfinite(replay_logits) & torch.isfinite(reference_logits)
    if bad.any():
        step, row, _ = _first(bad)
        values = replay_logits[step, row][bad[step, row]]
        failures.append(
            f"{_where(step, graph_at)}logits of row {row} at step {step + 1}: {values.numel()} value(s) "
            f"{_kinds(values)} in the replay where the float32 reference is finite"
        )
    for layer, (run, reference) in enumerate(zip(replay_cache, reference_cache)):
        for name, got, want in (("K", run[0], reference[0]), ("V", run[1], reference[1])):
            bad = ~torch.isfinite(got) & torch.isfinite(want)
            if bad.any():
                row, _, step, _ = _first(bad)
                values = got[row, :, step][bad[row, :, step]]
                failures.append(
                    f"{_where(step, graph_at)}cache layer {layer} {name} of row {row} at step {step + 1}: "
                    f"{values.numel()} value(s) {_kinds(values)} in the replay where the float32 reference is finite"
                )
                return failures
    return failures


def unusable_logits(logits: torch.Tensor) -> torch.Tensor:
    """Where logits [..., vocab] cannot be sampled from: NaN, +Inf, or a row with no finite value. A -Inf
    alone is a masked token (a padded vocabulary, a suppressed id), which softmax handles."""
    no_finite = ~torch.isfinite(logits).any(-1, keepdim=True)
    return torch.isnan(logits) | (logits == float("inf")) | no_finite


def require_finite(run: str, logits: torch.Tensor, cache: list, graph_at: GraphAt | None = None) -> None:
    """Raise NonFiniteError when `run` ("eager", "the float32 reference") made a non-finite logit or K/V."""
    hint = (
        "Check the checkpoint for NaN/Inf weights (cugraph-accel cannot judge or run a model that makes them); "
        "if it loads in float16, try {dtype='bfloat16'} or {dtype='float32'}."
    )
    if all_finite(logits, cache):
        return
    bad = ~torch.isfinite(logits)  # strict: the measures (softmax, KL) cannot take even a masked -Inf
    if bad.any():
        step, row, _ = _first(bad)
        raise NonFiniteError(
            f"{run} made {_kinds(logits[bad])} logits ({int(bad.sum())} value(s); first: row {row} at step {step + 1}"
            f"{', ' + graph_at(step) if graph_at else ''}).",
            hint,
        )
    for layer, (keys, values) in enumerate(cache):
        for name, tensor in (("K", keys), ("V", values)):
            bad = ~torch.isfinite(tensor)
            if bad.any():
                row, _, step, _ = _first(bad)
                raise NonFiniteError(
                    f"{run} wrote {_kinds(tensor[bad])} into cache layer {layer} {name} (first: row {row} at "
                    f"step {step + 1}).",
                    hint,
                )


def bad_parameters(model: torch.nn.Module, limit: int = 3) -> list[str]:
    """Names of up to `limit` parameters or buffers holding NaN or Inf (a pass over the weights: only
    after a step has already made non-finite values)."""
    found = []
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            found.append(f"{name} ({int((~torch.isfinite(tensor)).sum())} of {tensor.numel()})")
            if len(found) == limit:
                break
    return found


FIRST_STEP_PROMPT = 4  # prompt tokens of the finiteness check before capture


def check_first_step(session) -> None:
    """One eager prefill and decode step of a short prompt before anything is captured: a model whose
    eager logits are not finite gets one clear error here, naming the weights that hold NaN/Inf, instead
    of a capture, verify or generate that judges or samples garbage. The cache is reset after."""
    from accelerate_graph.verify.reference import eager_step  # imports transformers' attention internals

    length = max(1, min(FIRST_STEP_PROMPT, session.max_cache_len - 1))
    prompt = (torch.arange(length) % session.vocab_size).reshape(1, -1)
    try:
        logits = [session.prefill(prompt)]
        logits.append(
            eager_step(session, prompt[:, -1].to(session.device), torch.full((1,), length, device=session.device))
        )
        finite = not any(bool(unusable_logits(x).any()) for x in logits)
    finally:
        session.kv.reset()
    if finite:
        return
    weights = bad_parameters(session.model)
    if weights:
        where, hint = f"NaN/Inf in {', '.join(weights)}", "Use a checkpoint without NaN/Inf weights."
    else:
        where = f"no weight holds NaN/Inf: the step overflows in {str(session.model.dtype).removeprefix('torch.')}"
        hint = "Load the model with {dtype='bfloat16'} or {dtype='float32'}."
    raise NonFiniteError(f"the model's eager logits are not finite, before any graph was captured ({where}).", hint)
