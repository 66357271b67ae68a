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
so the reference stays independent of the machinery it judges.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

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
def _float32_cache_io(session: DecodeSession, cut: bool) -> Iterator[None]:
    """Cache layers that accept float32 K/V (rounded to the cache's dtype on write, as every run's are)
    and hand the layer back in float32 for attention: HF's cache update needs one dtype. With `cut`, only
    the slots the step can attend (_SLOTS_IN_USE, where set)."""
    patched = []
    for layer in [layer for batch in range(1, session.max_batch + 1) for layer in session.kv.view(batch).layers]:
        update = layer.update

        def promoted(key_states, value_states, *args, _update=update, _dtype=layer.keys.dtype, **kwargs):
            keys, values = _update(key_states.to(_dtype), value_states.to(_dtype), *args, **kwargs)
            slots = _SLOTS_IN_USE.get() if cut else None
            if slots is not None and slots < keys.shape[-2]:
                keys, values = keys[:, :, :slots], values[:, :, :slots]
            return keys.float(), values.float()

        layer.update = promoted
        patched.append(layer)
    try:
        yield
    finally:
        for layer in patched:
            del layer.update  # the class's method again


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
        with _cut_attention(session.model) as cut, _float32_cache_io(session, cut):
            yield
    finally:
        for handle in handles:
            handle.remove()


def reference_step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The float32 reference of one decode step (call inside `float32_reference`): attending only the
    slots up to the step's write slot, where the model's attention allows (see the module's doc). The write
    slot, not the positions: a left-padded row's position counts from its first real token, below the slot."""
    token = _SLOTS_IN_USE.set(max(session.kv.next_slot, int(positions.max())) + 1)
    try:
        return eager_step(session, tokens, positions).float()
    finally:
        _SLOTS_IN_USE.reset(token)


# steps a reference forward takes at most: its float32 activations, logits and attention scores are those of 16
# decode steps, whatever --steps asks for
STEPS_A_FORWARD = 16
# how far a forward of several steps may be from the steps one by one, as a share of bf16 eager's distance from
# them: float32's rounding and a K/V rounded the other way now and then (under 2% measured); a model whose
# multi-token forward computes otherwise is referenced step by step
STEPS_AGREE_WITHIN = 0.02
_STEPS_AGREE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> its probe's answer


def steps_a_forward(session: DecodeSession) -> int:
    """The steps `reference_steps` puts in one forward on `session`: STEPS_A_FORWARD where its probe found the
    model's multi-token forward as close to its steps as float32 is (`probe_steps_a_forward`), else one."""
    return STEPS_A_FORWARD if _STEPS_AGREE.get(session, False) else 1


def probe_steps_a_forward(session: DecodeSession) -> None:
    """Once a session: whether the model's float32 forward of several tokens is its decode steps one by one, to
    within STEPS_AGREE_WITHIN of bf16 eager's distance from them, on two rows from the cache's second slot and
    across its sliding window (if any): some architectures scale or mask by the forward's last position.
    Resets the cache: call it before prefilling."""
    if session in _STEPS_AGREE or session.model.dtype == torch.float32:
        return
    steps = min(STEPS_A_FORWARD, session.max_cache_len // 2)
    starts = {1} | ({max(session.window - steps // 2, 1)} if session.window else set())
    agree = True
    try:
        for start in sorted(starts):
            agree = agree and _steps_agree(session, min(start, session.max_cache_len - steps), steps)
    except (RuntimeError, ValueError, IndexError, TypeError) as err:  # a forward of several tokens it cannot run
        if is_out_of_memory(err):
            raise
        agree = False
    finally:
        session.kv.reset()
    _STEPS_AGREE[session] = agree


def _steps_agree(session: DecodeSession, prompt_len: int, steps: int) -> bool:
    rows = min(2, session.max_batch)
    gen = torch.Generator().manual_seed(prompt_len)
    prompt = torch.randint(0, session.vocab_size, (rows, prompt_len), generator=gen)
    tokens = torch.randint(0, session.vocab_size, (steps, rows), generator=gen).to(session.device)
    positions = torch.full((rows,), prompt_len, device=session.device)
    session.kv.reset()
    session.prefill(prompt, chunk=PREFILL_CHUNK)
    start = session.kv.snapshot(rows, prompt_len, steps)
    eager = torch.stack([eager_step(session, tokens[i], positions + i).float() for i in range(steps)])
    with float32_reference(session):
        session.kv.restore(start)
        one_by_one = torch.stack([reference_step(session, tokens[i], positions + i) for i in range(steps)])
        session.kv.restore(start)
        together = _one_forward(session, tokens, prompt_len, torch.zeros(rows, dtype=torch.long))
    return bool((together - one_by_one).abs().max() <= STEPS_AGREE_WITHIN * (eager - one_by_one).abs().max())


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
    token = _SLOTS_IN_USE.set(max(session.kv.next_slot + steps - 1, int(positions.max())) + 1)
    try:
        with torch.no_grad(), hf_attention(session.model):
            ids = tokens.T.to(session.device).contiguous()
            logits = session.forward(batch, ids, positions, session.attention_mask, every_position=True)
    finally:
        _SLOTS_IN_USE.reset(token)
    session.kv.advance(steps)
    return logits.float().transpose(0, 1)
