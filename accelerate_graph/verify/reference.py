"""The two runs a replay is judged against: the eager step (the model as loaded, HF's own attention) and
the float32 reference (the same step with weights and arithmetic in float32, one module at a time).

The float32 reference never holds a float32 copy of the model: a forward pre-hook on each module that
owns parameters promotes them (and its floating inputs) to float32 just before it runs, and its
forward hook puts the low-precision tensors back, so the extra memory is one module's weights in
float32 (the largest is the embedding or the LM head). It reads and writes the same KV cache as every
other run: new K/V are rounded to the cache's dtype when written, as in any run of the model, and read
back in float32, one layer at a time. Verify runs a case's teacher-forced steps through it 16 to a forward
(`reference_steps`): the weights promoted once, not once a step.

It reads back only the slots a step can attend (up to its position), where the model attends with HF's
sdpa: the slots after it are masked, so they add exact zeros to the softmax, and reading them cost most
of a long verify (H200, 2026-12-01: the 8B at a cache of 4,096, every slot promoted to float32 and
repeated for each query head, layer by layer: the reference was 195 of verify's 291 s). The cut is
explicit here (a slice of the full cache and of the mask), not a cache view of the kind the graphs use,
so the reference stays independent of the machinery it judges. Verify's eager run reads back the same slots
in the model's dtype (`slots_in_use`): the slots it skips held only masked zeros.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import AttentionInterface

from accelerate_graph.common.errors import is_out_of_memory
from accelerate_graph.compat.transformers_internals import attention_implementations
from accelerate_graph.core.decode_session import PREFILL_CHUNK, DecodeSession
from accelerate_graph.fused.grouped_attention import GROUPED, hf_attention, stands_in_for, switch_attention


def eager_step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One decode step without graphs, over the whole cache, with the attention the model was loaded
    with (HF's, where grouped attention was switched on): next-token logits [b, V]."""
    batch = tokens.shape[0]
    session.load_inputs(batch, tokens, positions)
    with torch.no_grad(), hf_attention(session.model):
        logits = session.step_fn(batch)()
    session.kv.advance()
    return logits


def _to_float32(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32:
        return value.float()
    if isinstance(value, tuple | list):
        return type(value)(_to_float32(v) for v in value)
    return value


def _owns_floats(module: torch.nn.Module) -> bool:
    tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    return any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors)


def _promote_while_running(module: torch.nn.Module) -> list:
    """Hooks that give `module` float32 parameters, buffers and inputs for the length of its forward."""
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []

    def before(mod, args, kwargs):
        for tensor in [*mod.parameters(recurse=False), *mod.buffers(recurse=False)]:
            if tensor.is_floating_point() and tensor.dtype != torch.float32:
                saved.append((tensor, tensor.data))
                tensor.data = tensor.data.float()
        return _to_float32(args), {key: _to_float32(value) for key, value in kwargs.items()}

    def after(mod, args, output):
        while saved:
            tensor, data = saved.pop()
            tensor.data = data

    return [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, always_call=True),
    ]


# The slots the current reference step can attend (its last position + 1); None: all of them
_SLOTS_IN_USE: ContextVar[int | None] = ContextVar("slots_in_use", default=None)


@contextmanager
def _attending_up_to(slots: int) -> Iterator[None]:
    """While active, a cut attention reads back the first `slots` slots (`_cache_io`, `_cut_sdpa`)."""
    token = _SLOTS_IN_USE.set(slots)
    try:
        yield
    finally:
        _SLOTS_IN_USE.reset(token)


CUT_ATTENTION = "cugraph_reference_sdpa"  # HF's sdpa with the mask cut to the keys it is given


def _cut_sdpa(module, query, key, value, attention_mask, *args, **kwargs):
    """HF's sdpa over the slots the reference read back: the mask cut to the keys' length."""
    if attention_mask is not None and attention_mask.shape[-1] > key.shape[-2]:
        attention_mask = attention_mask[..., : key.shape[-2]]
    return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)


@contextmanager
def _cut_attention(model: torch.nn.Module) -> Iterator[bool]:
    """While active, a model that attends with HF's sdpa (or our grouped attention standing in for sdpa)
    attends with `_cut_sdpa`, and grouped attention standing in for eager with eager; yields whether every
    attention of the model now cuts, the condition for reading back fewer slots than the cache has
    (another attention would not cut its mask)."""
    AttentionInterface.register(CUT_ATTENTION, _cut_sdpa)
    AttentionMaskInterface.register(CUT_ATTENTION, sdpa_mask)
    replaced = stands_in_for(model)
    undo = [
        switch_attention(model, "sdpa", CUT_ATTENTION),
        switch_attention(model, GROUPED, CUT_ATTENTION if replaced == "sdpa" else replaced),
    ]
    try:
        yield set(attention_implementations(model).values()) == {CUT_ATTENTION}
    finally:
        for step in reversed(undo):
            step()


@contextmanager
def _cache_io(session: DecodeSession, cut: bool, float32: bool) -> Iterator[None]:
    """Cache layers that, with `cut`, hand attention only the slots the step can attend (_SLOTS_IN_USE, where
    set); with `float32`, accept float32 K/V (rounded to the cache's dtype on write, as every run's are) and
    hand the layer back in float32: HF's cache update needs one dtype."""
    patched = []
    for layer in [layer for batch in range(1, session.max_batch + 1) for layer in session.kv.view(batch).layers]:
        update = layer.update

        def reading_back(key_states, value_states, *args, _update=update, _dtype=layer.keys.dtype, **kwargs):
            keys, values = _update(key_states.to(_dtype), value_states.to(_dtype), *args, **kwargs)
            slots = _SLOTS_IN_USE.get() if cut else None
            if slots is not None and slots < keys.shape[-2]:
                keys, values = keys[:, :, :slots], values[:, :, :slots]
            return (keys.float(), values.float()) if float32 else (keys, values)

        layer.update = reading_back
        patched.append(layer)
    try:
        yield
    finally:
        for layer in patched:
            del layer.update  # the class's method again


@contextmanager
def slots_in_use(session: DecodeSession) -> Iterator[None]:
    """While active, `step_in_use` runs the eager step over the slots it can attend, as the reference does:
    the slots after them are masked, adding exact zeros, yet HF's sdpa reads and repeats each for every
    query head of a grouped model (the 8B at 4,096 slots: 2 GB a layer a step). Verify's eager run; bench
    and eval keep the eager step as users run it, over the whole cache."""
    with _cut_attention(session.model) as cut, _cache_io(session, cut, float32=False):
        yield


def prefill_in_use(session: DecodeSession, prompt: torch.Tensor, chunk: int) -> torch.Tensor:
    """`session.prefill(prompt, chunk)` of a prompt [b, P], each chunk attending the slots up to its last token
    (`slots_in_use`): the slots after are masked, yet HF's sdpa reads and repeats them all for every chunk.
    Verify's prefill; generate's and serve's stay as they are. Returns the last position's logits [b, V]."""
    with slots_in_use(session):
        return session.prefill(prompt, chunk=chunk, each_chunk=_attending_up_to)


@contextmanager
def float32_reference(session: DecodeSession) -> Iterator[None]:
    """While active, the session's eager step computes in float32 from the low-precision weights and
    the shared cache. A no-op for a float32 model: the reference is the model itself."""
    if session.model.dtype == torch.float32:
        yield
        return
    handles = []
    try:
        for module in session.model.modules():
            if _owns_floats(module):
                handles += _promote_while_running(module)
        with _cut_attention(session.model) as cut, _cache_io(session, cut, float32=True):
            yield
    finally:
        for handle in handles:
            handle.remove()


def step_in_use(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The eager step (inside `slots_in_use` or `float32_reference`) attending only the slots up to its write
    slot, where the model's attention allows (see the module's doc). The write slot, not the positions: a
    left-padded row's position counts from its first real token, below the slot."""
    with _attending_up_to(session.kv.next_slot + 1):  # the host's slot: the positions' max would sync every step
        return eager_step(session, tokens, positions)


def reference_step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The float32 reference of one decode step (call inside `float32_reference`), over the slots in use."""
    return step_in_use(session, tokens, positions).float()


# steps a reference forward takes at most: its float32 activations, logits and attention scores are those of 16
# decode steps, whatever --steps asks for
STEPS_A_FORWARD = 16
# how far a forward of several steps may be from the steps one by one, as a share of bf16 eager's distance from
# them, below which it is taken as they are whatever the noise: float32's rounding and a K/V now and then rounded
# to bf16 the other way (tiny models: under 0.2%); Beam and EXAONE-4 compute such a forward otherwise (2.3%, 3.6%)
STEPS_AGREE_WITHIN = 0.02
# a real-size model's steps are that far from themselves under float32 noise alone (Qwen2.5-0.5B: 1-2%, each K/V
# rounded the other way reaching every later layer), so above STEPS_AGREE_WITHIN the forward may be NOISE_TIMES as
# far as the steps are from a run of themselves in which every linear layer has relative noise of FLOAT32_NOISE on
# its output (a float32 sum in another order, about what another kernel gives)
NOISE_TIMES = 4
FLOAT32_NOISE = 2.0**-22
_PROBES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> its StepsProbe


@dataclass(frozen=True)
class StepsProbe:
    """What a session's probe found: the steps a reference forward takes, the multi-token forward's distance from
    the steps one by one as a share of bf16 eager's (None where not measured), and why one step where so."""

    steps: int
    share: float | None = None
    noise: float | None = None  # the steps' distance from themselves under float32 noise, where measured
    why: str = ""

    def line(self) -> str:
        """The probe in one line, for verify's and eval's summaries."""
        measured = f"{self.share:.2%} of eager's distance" if self.share is not None else ""
        noise = f"; float32 noise alone {self.noise:.2%}" if self.noise is not None else ""
        if self.steps == 1:
            found = f": {measured}{noise}" if measured else ""
            return f"float32 reference: one step a forward ({self.why}{found})"
        apart = f"a forward of several tokens {measured} from its steps{noise}"
        return f"float32 reference: {self.steps} steps a forward ({apart})"

    def as_json(self) -> dict:
        return {"steps_a_forward": self.steps, "share_of_eager": self.share, "noise_share": self.noise, "why": self.why}


def steps_a_forward(session: DecodeSession) -> int:
    """The steps `reference_steps` puts in one forward on `session`: STEPS_A_FORWARD where its probe found the
    model's multi-token forward as close to its steps as float32 is (`probe_steps_a_forward`), else one."""
    probe = steps_probe(session)
    return probe.steps if probe else 1


def steps_probe(session: DecodeSession) -> StepsProbe | None:
    """The session's probe (None: not probed, or a float32 model, whose reference is itself)."""
    return _PROBES.get(session)


def reference_json(session: DecodeSession) -> dict:
    """How the session's float32 reference ran, for verify's and eval's JSON (`StepsProbe.as_json`)."""
    if session.model.dtype == torch.float32:
        return StepsProbe(1, why="no reference run: a float32 model is its own").as_json()
    return (steps_probe(session) or StepsProbe(1, why="not probed")).as_json()


def probe_steps_a_forward(session: DecodeSession) -> None:
    """Once a session: whether the model's float32 forward of several tokens is its decode steps one by one (on two
    rows from the cache's second slot and across its sliding window, if any: some architectures scale or mask by
    the forward's last position): within STEPS_AGREE_WITHIN of bf16 eager's distance from them, or within
    NOISE_TIMES of the distance float32 noise alone puts between the steps and themselves. Resets the cache: call
    it before prefilling."""
    if session in _PROBES or session.model.dtype == torch.float32:
        return
    steps = min(STEPS_A_FORWARD, session.max_cache_len // 2)
    starts = {1} | ({max(session.window - steps // 2, 1)} if session.window else set())
    try:
        found = [_shares_apart(session, min(start, session.max_cache_len - steps), steps) for start in sorted(starts)]
        far = [(share, noise) for share, noise in found if not _agrees(share, noise)]
        share, noise = max(far or found, key=lambda pair: pair[0])
        probe = StepsProbe(STEPS_A_FORWARD, share, noise) if not far else StepsProbe(1, share, noise, _too_far(steps))
    except (RuntimeError, ValueError, IndexError, TypeError) as err:  # a forward of several tokens it cannot run
        if is_out_of_memory(err):
            raise
        probe = StepsProbe(1, why=f"a forward of {steps} tokens raised {type(err).__name__}: {str(err)[:160]}")
    finally:
        session.kv.reset()
    _PROBES[session] = probe


def _agrees(share: float, noise: float | None) -> bool:
    return share <= STEPS_AGREE_WITHIN or (noise is not None and share <= NOISE_TIMES * noise)


def _too_far(steps: int) -> str:
    return (
        f"a forward of {steps} tokens was further from its steps than {STEPS_AGREE_WITHIN:.0%} of eager's distance "
        f"and {NOISE_TIMES}x float32 noise's"
    )


def _shares_apart(session: DecodeSession, prompt_len: int, steps: int) -> tuple[float, float | None]:
    """The float32 forward of `steps` tokens from `prompt_len` against the same steps one by one, as a share of bf16
    eager's distance from them (largest logit difference each); and, where that share is over STEPS_AGREE_WITHIN,
    the share between the steps and a run of them under float32 noise (`_float32_noise`), else None."""
    rows = min(2, session.max_batch)
    gen = torch.Generator().manual_seed(prompt_len)
    prompt = torch.randint(0, session.vocab_size, (rows, prompt_len), generator=gen)
    tokens = torch.randint(0, session.vocab_size, (steps, rows), generator=gen).to(session.device)
    positions = torch.full((rows,), prompt_len, device=session.device)
    session.kv.reset()
    session.prefill(prompt, chunk=PREFILL_CHUNK)
    start = session.kv.snapshot(rows, prompt_len, steps)
    with slots_in_use(session):  # as verify's eager run
        eager = torch.stack([step_in_use(session, tokens[i], positions + i).float() for i in range(steps)])

    def stepwise():
        session.kv.restore(start)
        return torch.stack([reference_step(session, tokens[i], positions + i) for i in range(steps)])

    with float32_reference(session):
        one_by_one = stepwise()
        session.kv.restore(start)
        together = _one_forward(session, tokens, prompt_len, torch.zeros(rows, dtype=torch.long))
        eager_apart = (eager - one_by_one).abs().max().item()

        def share(other: torch.Tensor) -> float:
            apart = (other - one_by_one).abs().max().item()
            return apart / eager_apart if eager_apart > 0 else (0.0 if apart == 0 else math.inf)

        forward_share = share(together)
        if forward_share <= STEPS_AGREE_WITHIN:
            return forward_share, None
        with _float32_noise(session.model, seed=prompt_len):
            noisy = stepwise()
    return forward_share, share(noisy)


@contextmanager
def _float32_noise(model: torch.nn.Module, seed: int) -> Iterator[None]:
    """While active, every float32 output of the model's linear layers (FP8 ones included) is scaled by 1 + u, u
    uniform within +-FLOAT32_NOISE: the float32 rounding another summation order would leave."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)

    def noisy(module, args, output):
        if isinstance(output, torch.Tensor) and output.dtype == torch.float32:
            noise = torch.rand(output.shape, generator=generator, device=output.device) * 2 - 1
            return output * (1 + FLOAT32_NOISE * noise)
        return None

    from accelerate_graph.quant.fp8_linear import Fp8Linear  # custom ops: only where a probe gets this far

    products = (torch.nn.Linear, Fp8Linear)  # not norms or embeddings: noise there put Beam's steps 0.5%+ apart
    handles = [m.register_forward_hook(noisy) for m in model.modules() if isinstance(m, products)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def reference_steps(session: DecodeSession, tokens: torch.Tensor, first: int, pads: torch.Tensor) -> torch.Tensor:
    """The float32 reference of the teacher-forced decode steps `tokens` [steps, b] from write slot `first`,
    each row left-padded by `pads` [b] (call inside `float32_reference`), `steps_a_forward(session)` steps to a
    forward: logits [steps, b, V]. One forward and one promotion of the weights for many steps (the reference
    was half of a verify's time); in float32 that differs from one a step by float32's rounding, far below the
    bf16 errors judged, where the probe found so. Each token's K/V is still rounded to the cache's dtype on write
    and read back by later ones."""
    per_forward = steps_a_forward(session)
    if per_forward == 1:
        positions = first - pads.to(session.device)
        return torch.stack([reference_step(session, tokens[i], positions + i).clone() for i in range(tokens.shape[0])])
    parts = []
    for start in range(0, tokens.shape[0], per_forward):
        parts.append(_one_forward(session, tokens[start : start + per_forward], first + start, pads))
    return torch.cat(parts)


def _one_forward(session: DecodeSession, tokens: torch.Tensor, first: int, pads: torch.Tensor) -> torch.Tensor:
    steps, batch = tokens.shape
    positions = first + torch.arange(steps, device=session.device)[None, :] - pads.to(session.device)[:, None]
    with _attending_up_to(session.kv.next_slot + steps), torch.no_grad(), hf_attention(session.model):
        ids = tokens.T.to(session.device).contiguous()
        logits = session.forward(batch, ids, positions, session.attention_mask, every_position=True)
    session.kv.advance(steps)
    return logits.float().transpose(0, 1)
