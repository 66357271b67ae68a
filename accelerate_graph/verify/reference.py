"""The two runs a replay is judged against: the eager step (the model as loaded, HF's own attention) and
the float32 reference (the same step with weights and arithmetic in float32, one module at a time).

The float32 reference never holds a float32 copy of the model: a forward pre-hook on each module that
owns parameters promotes them (and its floating inputs) to float32 just before it runs, and its
forward hook puts the low-precision tensors back, so the extra memory is one module's weights in
float32 (the largest is the embedding or the LM head). It reads and writes the same KV cache as every
other run: new K/V are rounded to the cache's dtype when written, as in any run of the model, and read
back in float32, one layer at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import hf_attention


def eager_step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One decode step without graphs, over the whole cache, with the attention the model was loaded
    with (HF's sdpa where grouped attention was switched on): next-token logits [b, V]."""
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


@contextmanager
def _float32_cache_io(session: DecodeSession) -> Iterator[None]:
    """Cache layers that accept float32 K/V (rounded to the cache's dtype on write, as every run's are)
    and hand the whole layer back in float32 for attention: HF's cache update needs one dtype."""
    patched = []
    for layer in [layer for batch in range(1, session.max_batch + 1) for layer in session.kv.view(batch).layers]:
        update = layer.update

        def promoted(key_states, value_states, *args, _update=update, _dtype=layer.keys.dtype, **kwargs):
            keys, values = _update(key_states.to(_dtype), value_states.to(_dtype), *args, **kwargs)
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
        with _float32_cache_io(session):
            yield
    finally:
        for handle in handles:
            handle.remove()


def reference_step(session: DecodeSession, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The float32 reference of one decode step (call inside `float32_reference`)."""
    return eager_step(session, tokens, positions).float()
