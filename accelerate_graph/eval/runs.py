"""Teacher-forced runs of the windows: the float32 reference first, then each arm, every one from the
same prefilled first token, and per scored token what the measures need.

Windows go through in batches of up to `rows` (the largest bucket): a batch's graphs are the bucket it
falls in, padded as in any replay. Each run starts from a reset cache and a prefill of the windows' first
tokens (eager for every arm, in float32 for the reference), so every arm decodes on its own K/V from one
start, as it would serve; the reference runs up to STEPS_A_FORWARD steps a forward (`reference.reference_steps`). The
reference's log-probabilities of a batch are kept until every arm has been compared with them (steps x rows
x vocabulary float32 values: 8 GiB for a 128k vocabulary at 32 rows x 512 tokens), on the device where they
fit beside what the arms need, else on the host; an arm's own are reduced step by step.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.memory import free_bytes
from accelerate_graph.eval.windows import Windows
from accelerate_graph.verify.reference import (
    STEPS_A_FORWARD,
    eager_step,
    float32_reference,
    probe_steps_a_forward,
    reference_steps,
)

StepFn = Callable[[DecodeSession, torch.Tensor, torch.Tensor], torch.Tensor]  # (tokens [b], positions [b]) -> [b, V]


@dataclass(frozen=True)
class Arm:
    """A way to run the decode step: `step` returns next-token logits [b, V] and advances the cache."""

    name: str
    step: StepFn
    baseline: bool = False  # the arm the others are judged against (eager in the model's dtype)
    judged: bool = True  # False: measured only (what FP8 weights cost), no verdict


def eager_arm() -> Arm:
    return Arm("eager", eager_step, baseline=True)


def graph_arm(name: str, graphs: DecodeGraphs) -> Arm:
    return Arm(name, lambda session, tokens, positions: graphs.run(tokens, positions))


def swapped_arm(name: str, swap: Callable[[], AbstractContextManager]) -> Arm:
    """Eager with other layers in place for the step (`swap()`: e.g. a Quantization's FP8 layers), measured
    against the same reference and not judged: a change of weights is a cost to read, not a fault."""

    def step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        with swap():
            return eager_step(session, tokens, positions)

    return Arm(name, step, judged=False)


@dataclass
class TokenScores:
    """Per window and scored token ([windows, tokens] each)."""

    nll: torch.Tensor  # -log p(true next token)
    kl: torch.Tensor  # KL(reference || this run), nats
    same_top: torch.Tensor  # bool: the same most likely token as the reference


def _empty(windows: Windows) -> TokenScores:
    shape = (windows.count, windows.scored_per_window)
    return TokenScores(torch.zeros(shape), torch.zeros(shape), torch.zeros(shape, dtype=torch.bool))


def _decode(session: DecodeSession, rows: torch.Tensor, step: StepFn, each: Callable[[int, torch.Tensor], None]):
    """Prefill the first token of each row of `rows` [b, L], then feed tokens 1..L-2 one decode step each;
    `each(i, logits)` gets step i's logits [b, V] (predicting token i + 2)."""
    session.kv.reset()
    session.prefill(rows[:, :1])
    batch = rows.shape[0]
    device_rows = rows.to(session.device)
    with torch.no_grad():
        for i in range(rows.shape[1] - 2):
            positions = torch.full((batch,), i + 1, device=session.device)
            each(i, step(session, device_rows[:, i + 1], positions))


def _reference_decode(session: DecodeSession, rows: torch.Tensor, each: Callable[[int, torch.Tensor], None]):
    """`_decode`'s steps by the float32 reference (inside `float32_reference`), a forward's steps at a time."""
    session.kv.reset()
    session.prefill(rows[:, :1])
    device_rows, no_padding = rows.to(session.device), torch.zeros(rows.shape[0], dtype=torch.long)
    for first in range(1, rows.shape[1] - 1, STEPS_A_FORWARD):  # step i feeds token i + 1, at slot i + 1
        tokens = device_rows[:, first : min(first + STEPS_A_FORWARD, rows.shape[1] - 1)].T
        for offset, logits in enumerate(reference_steps(session, tokens, first, no_padding)):
            each(first - 1 + offset, logits)


def score_windows(
    session: DecodeSession,
    windows: Windows,
    arms: list[Arm],
    rows: int,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, dict[str, TokenScores]]:
    """The reference's NLL per scored token [windows, tokens], and each arm's TokenScores.
    `on_batch(windows_done)` after each batch."""
    reference_nll = torch.zeros(windows.count, windows.scored_per_window)
    scores = {arm.name: _empty(windows) for arm in arms}
    probe_steps_a_forward(session)
    for first in range(0, windows.count, rows):
        batch = windows.tokens[first : first + rows]
        span = slice(first, first + batch.shape[0])
        targets = batch[:, 2:].to(session.device)  # [b, S]: what each step predicts
        reference_logp, reference_nll[span] = _reference_run(session, batch, targets)
        for arm in arms:
            _score_arm(session, batch, arm, reference_logp, targets, scores[arm.name], span)
        session.kv.reset()
        if on_batch:
            on_batch(span.stop)
    return reference_nll, scores


# what the arms' steps may still allocate beside the kept log-probabilities (logits, softmax, KL terms)
ARM_HEADROOM = 2 << 30


def _keeps_on_device(device: torch.device, steps: int, logits: torch.Tensor) -> bool:
    """Whether a batch's reference log-probabilities (`steps` of `logits`' shape) fit on a GPU beside the
    arms' own work; elsewhere they go to the host."""
    if device.type != "cuda":
        return False
    free, _ = free_bytes(device)
    return free is not None and steps * logits.numel() * 4 + ARM_HEADROOM <= free


def _reference_run(session: DecodeSession, batch: torch.Tensor, targets: torch.Tensor):
    """The float32 reference over `batch`: its log-probabilities per step ([b, V] each, on the device or
    the host), its NLL [b, steps]."""
    logps: list[torch.Tensor] = []  # the logits' own width: a padded LM head may exceed the vocabulary
    nll = torch.empty(batch.shape[0], targets.shape[1])
    on_device = False  # decided at the first step, from the logits' width

    def keep(i: int, logits: torch.Tensor) -> None:
        nonlocal on_device
        logp = torch.log_softmax(logits.float(), dim=-1)
        if i == 0:
            on_device = _keeps_on_device(session.device, targets.shape[1], logp)
        logps.append(logp if on_device else logp.cpu())
        nll[:, i] = -logp.gather(-1, targets[:, i : i + 1]).squeeze(-1).cpu()

    with float32_reference(session):
        _reference_decode(session, batch, keep)
    return logps, nll


def _score_arm(session, batch, arm: Arm, reference_logp, targets, into: TokenScores, span: slice) -> None:
    def compare(i: int, logits: torch.Tensor) -> None:
        logp = torch.log_softmax(logits.float(), dim=-1)
        reference = reference_logp[i].to(session.device)
        p = reference.exp()  # a token the reference rules out (-inf) adds nothing, not NaN
        terms = torch.where(p > 0, p * (reference - logp), torch.zeros_like(p))
        into.kl[span, i] = terms.sum(-1).clamp_min(0).cpu()
        into.nll[span, i] = -logp.gather(-1, targets[:, i : i + 1]).squeeze(-1).cpu()
        into.same_top[span, i] = (logp.argmax(-1) == reference.argmax(-1)).cpu()

    _decode(session, batch, arm.step, compare)
