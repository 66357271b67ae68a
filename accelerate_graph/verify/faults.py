"""Faults planted in the replay path only, to prove `verify` catches them (tests/verify/test_faults.py,
benchmarks/fault_sweep.py).

Most faults are hooks that exist only while a graph is being recorded: the graph keeps the faulty
work, the eager reference never runs it. They are plain tensor operations, so the CPU emulation and
CUDA graphs record them alike. `padded_leak` is a step that mixes rows (a mean over the batch): eager
runs only the real rows, a padded replay mixes the padding rows in. The stale-graph faults replace
the dispatch table after capture. `COVERAGE_KINDS` are faults that only a left-padded batch, a late
slot or a long run shows, and two that verify must pass (they change nothing a request sees).

Each hook a fault adds counts its calls, and a capture in which one never ran in a recorded step is refused:
a fault that does not fire would pass for nothing (under --fuse the layer program reads most projections' weights
without calling their modules).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from accelerate_graph.compat.torch_internals import forward_hook_tables
from accelerate_graph.compat.transformers_internals import rotary_embedding_modules
from accelerate_graph.core.backends import GraphBackend
from accelerate_graph.core.capture import DecodeGraphs, capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.layers import decoder_layers
from accelerate_graph.quant.quantize import fp8_layers

Undo = Callable[[], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    kind: str
    size: float = 0.0  # drift: eps; close_flip: top-2 gap (fraction of the row's largest logit); padded_leak: weight
    layer: int = -1  # the decoder layer a layer or cache fault hits
    cuda_safe: bool = True  # False: on a GPU it would end the process (a device-side assert)

    def describe(self) -> str:
        return f"{self.kind}({self.size:g})" if self.size else self.kind


# The kinds; those with a size are swept by benchmarks/fault_sweep.py.
KINDS = (
    "frozen_position",  # the position read from a Python int: frozen at its capture value
    "skipped_write",  # one layer's cache write undone
    "wrong_slot",  # one layer's cache write lands one slot late
    "skipped_layer",  # one decoder layer returns its input
    "padded_leak",  # a mean over the batch: padding rows leak into real rows
    "wrong_bucket",  # the largest bucket dispatches to the next smaller bucket's graphs
    "wrong_context",  # the largest context bucket dispatches to the smallest's graphs (CPU only)
    "drift",  # every logit scaled by 1 + size
    "close_flip",  # the runner-up logit raised above the top one where their gap is under size
    "rotary_skew",  # every rotary angle scaled by 1 + size
    # non-finite values and a noisier cache write (verify/finite.py, the calibrated floor of criterion.py)
    "nan_top_logit",  # row 0's top logit is NaN
    "inf_top_logit",  # row 0's top logit is +Inf (its greedy token unchanged)
    "nan_cache",  # one layer writes a NaN into row 0's K
    "cache_noise",  # one layer's written K/V get noise of size x their rms (cache_noise_fault: x eager's error)
    "wrong_scale",  # FP8 weights: one layer's output channel 0 scale x (1 + size) (its block row under block scales)
)
# kind -> default size
SIZED = {
    "drift": 1e-3, "close_flip": 0.05, "padded_leak": 0.1, "rotary_skew": 0.01, "cache_noise": 1e-2, "wrong_scale": 3.0,
}  # fmt: skip

# Faults that only what generate and serve do shows; the last two change nothing a request could call wrong and
# must pass verify.
COVERAGE_KINDS = (
    "ignored_mask",  # the step attends every slot: a left-padded row's padding is not hidden
    "shared_position",  # every row decodes at row 0's position
    "late_slot",  # every logit x1.5 from write slot `size` on
    "late_replay",  # every logit x1.5 from a graph's `size`-th run of the step on (its count kept on the device)
    "padding_rows_only",  # the bucket's padding rows garbled: no real row changes
    "rounding_noise",  # every nn.Linear as another correct kernel: within 5/8 ulp of exact, unlike eager
)
COVERAGE_SIZED = {"late_slot": 32, "late_replay": 41}  # kind -> default first slot / first run


def fault(kind: str, size: float | None = None, layer: int = -1) -> Fault:
    if kind not in (*KINDS, *COVERAGE_KINDS):
        raise ValueError(f"unknown fault {kind!r}; one of {', '.join((*KINDS, *COVERAGE_KINDS))}")
    default = {**SIZED, **COVERAGE_SIZED}.get(kind, 0.0)
    return Fault(kind, default if size is None else size, layer, kind != "wrong_context")


def capture_with_fault(
    session: DecodeSession,
    backend: GraphBackend,
    buckets: tuple[int, ...],
    planted: Fault | None,
    contexts: tuple[int, ...] = (),
    only: tuple[int, int] | None = None,
    fuse: bool = False,
) -> tuple[DecodeGraphs, Undo]:
    """Capture with `planted` in the recorded step (only in graph `only`=(bucket, context) if given;
    None: no fault). `fuse`: the fused step, set up as `capture --fuse` sets it up (a session fused
    already records its fused step either way). Returns the graphs and what undoes any hook that outlives
    the capture and the fusing. Raises ValueError where the fault's code did not run in a recorded step."""
    undos: list[Undo] = []
    planted = planted or Fault("none")
    if fuse and session.fused is None:
        undos.append(_fused_step_on(session))
    lasting: list[_Hooked] = []
    try:
        if planted.kind in _LASTING_FAULTS:
            undo, lasting = _counting_hooks_added(
                session.model, lambda: _LASTING_FAULTS[planted.kind](session, planted)
            )
            undos.append(undo)
        graphs = _capture(session, backend, buckets, planted, contexts, only, lasting)
        if planted.kind in _DISPATCH_FAULTS and not _DISPATCH_FAULTS[planted.kind](graphs):
            raise ValueError(f"{planted.kind} changed no graph: the capture has nothing it could replace")
    except BaseException:
        _undo_all(undos)
        raise
    return graphs, lambda: _undo_all(undos)


def _capture(session, backend, buckets, planted: Fault, contexts, only, lasting: list[_Hooked]) -> DecodeGraphs:
    """capture_decode_graphs with the recording fault's hooks around each step a graph records (those of
    graph `only` alone if given); then the check that every hook of the fault ran in each of those steps
    (after the capture: raising inside a CUDA graph's recording would leave the stream capturing)."""
    recording = _RECORDING_FAULTS.get(planted.kind)
    plain = session.capture_step
    silences: list[str] = []

    def capture_step(batch: int, context: int | None = None):
        step = plain(batch, context)
        meant = recording is not None and (only is None or only == (batch, context))
        if not meant and not lasting:
            return step

        def faulty() -> torch.Tensor:
            hooked = list(lasting)
            for hook in hooked:
                hook.calls = 0
            if not meant:
                out = step()
            else:
                undos, added = _counting_hooks_added(session.model, lambda: recording(session, planted))
                if not added:
                    silences.append(f"{planted.kind} planted no hook, so nothing shows that it ran")
                hooked += added
                with _installed(undos):
                    out = step()
            silences.extend(_silence(session, planted, hooked, batch, context))
            return out

        return faulty

    session.capture_step = capture_step
    try:
        graphs = capture_decode_graphs(session, backend, buckets, contexts=contexts)
    finally:
        del session.capture_step  # back to the class's method
    if silences:
        raise ValueError(silences[0])
    return graphs


def _fused_step_on(session: DecodeSession) -> Undo:
    """The session's captures record the fused step from now on, under the settings in use, as the CLI's
    `--fuse` (capture_flow) sets it up. Returns what puts the session's plain step and attention back."""
    from accelerate_graph import settings as engine_settings
    from accelerate_graph.capture_flow import GraphRequest
    from accelerate_graph.capture_flow import _start_fusing as start

    request = GraphRequest(
        buckets=(session.max_batch,),
        cache_len=session.max_cache_len,
        prompt_len=1,
        settings=engine_settings.current(),
        fuse=True,
    )
    attention_back = start(session, request)

    def undo() -> None:
        attention_back()
        session.fused = None

    return undo


def _undo_all(undos: Sequence[Undo]) -> None:
    for undo in reversed(undos):
        undo()


# -- the proof that a fault ran: every hook it added counts its calls in each recorded step ---------------
@dataclass
class _Hooked:
    where: str  # the hooked module's name in the model
    calls: int = 0


def _counting_hooks_added(model: torch.nn.Module, install: Callable[[], T]) -> tuple[T, list[_Hooked]]:
    """`install()`'s result, and each forward (pre-)hook it added to a module of `model`, now counting its
    calls (replaced under its handle's id: its flags and its removal stay)."""
    tables = [(name, table) for name, module in model.named_modules() for table in forward_hook_tables(module)]
    before = {(id(table), key) for _, table in tables for key in table}
    result = install()
    added = []
    for name, table in tables:
        for key, hook in list(table.items()):
            if (id(table), key) not in before:
                added.append(_Hooked(name or type(model).__name__))
                table[key] = _counting(hook, added[-1])
    return result, added


def _counting(hook: Callable, hooked: _Hooked) -> Callable:
    def counted(*args, **kwargs):
        hooked.calls += 1
        return hook(*args, **kwargs)

    return counted


# under --fuse a decoder layer runs the layer program or its class's compiled forward
_FUSED_SILENCE = (
    "under --fuse the layer program multiplies the projections' weights without calling their modules, and a "
    "compiled layer runs no hook added after it compiled; plant it without --fuse"
)


def _silence(session: DecodeSession, planted: Fault, hooked: list[_Hooked], batch: int, context) -> list[str]:
    """What says that some hook of the fault did not run in this step; nothing where each did."""
    silent = list(dict.fromkeys(h.where for h in hooked if not h.calls))
    if not silent:
        return []
    names = ", ".join(silent[:3]) + (f" and {len(silent) - 3} more" if len(silent) > 3 else "")
    why = _FUSED_SILENCE if session.fused is not None else "the step does not call those modules"
    return [
        f"{planted.kind} never ran in the recorded step of bucket {batch}, context {context}: its hooks on "
        f"{names} did not run ({why})"
    ]


@contextlib.contextmanager
def _installed(undos: Sequence[Undo]) -> Iterator[None]:
    try:
        yield
    finally:
        for undo in undos:
            undo()


def _layer(session: DecodeSession, index: int) -> tuple[torch.nn.Module, int]:
    layers = decoder_layers(session.model)
    index = index % len(layers)
    return layers[index], index


def _frozen_position(session: DecodeSession, planted: Fault) -> list[Undo]:
    """A decode step whose positions come from the host's copy of the write slot: right in eager,
    the capture-time value in every replay."""

    def pre(module, args, kwargs):
        positions = kwargs.get("position_ids")
        if positions is not None and positions.shape[-1] == 1:
            kwargs["position_ids"] = torch.full_like(positions, session.kv.next_slot)
        return args, kwargs

    return [session.model.register_forward_pre_hook(pre, with_kwargs=True).remove]


def _moved_write(session: DecodeSession, planted: Fault, shift: int | None) -> list[Undo]:
    """Undo one layer's cache write (shift None), or move it `shift` slots later, with tensor ops on the
    device's write position, so the graph records them."""
    module, index = _layer(session, planted.layer)
    cache = session.kv.layers[index]
    saved: dict[str, torch.Tensor] = {}

    def pre(module, args):
        slot = cache.cumulative_length.reshape(1).clone()
        saved["slot"] = slot
        saved["old"] = [t.index_select(2, slot) for t in (cache.keys, cache.values)]

    def post(module, args, output):
        slot = saved["slot"]
        for n, tensor in enumerate((cache.keys, cache.values)):
            written = tensor.index_select(2, slot)
            tensor.index_copy_(2, slot, saved["old"][n])
            if shift is not None:
                tensor.index_copy_(2, slot + shift, written)

    return [module.register_forward_pre_hook(pre).remove, module.register_forward_hook(post).remove]


def _skipped_layer(session: DecodeSession, planted: Fault) -> list[Undo]:
    module, _ = _layer(session, planted.layer)

    def post(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    return [module.register_forward_hook(post, with_kwargs=True).remove]


def _logits_hook(session: DecodeSession, change: Callable[[torch.Tensor], torch.Tensor]) -> list[Undo]:
    head = session.model.get_output_embeddings()
    return [head.register_forward_hook(lambda module, args, output: change(output)).remove]


def _drift(session: DecodeSession, planted: Fault) -> list[Undo]:
    return _logits_hook(session, lambda logits: logits * (1 + planted.size))


def _close_flip(session: DecodeSession, planted: Fault) -> list[Undo]:
    return _logits_hook(session, lambda logits: flip_close_rows(logits, planted.size))


def _rotary_skew(session: DecodeSession, planted: Fault) -> list[Undo]:
    """Every rotary angle position x frequency becomes (1 + size) x that, as a wrong rope base would make
    it: the module's (cos, sin) rotated on by size x the angle, so its attention scaling is kept."""
    modules = rotary_embedding_modules(session.model)
    if not modules:
        raise ValueError("a rotary-skew fault needs a model with rotary embeddings")

    def post(module, args, kwargs, output):
        cos, sin = output
        positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        frequencies = module.inv_freq.float().repeat(2)  # HF's cos/sin: the half-dim angles twice over
        if frequencies.shape[-1] != cos.shape[-1]:
            raise ValueError(
                f"a rotary-skew fault needs {cos.shape[-1] // 2} frequencies, the module has "
                f"{module.inv_freq.shape[-1]}"
            )
        extra = planted.size * positions.float()[..., None] * frequencies
        turned_cos = cos.float() * torch.cos(extra) - sin.float() * torch.sin(extra)
        turned_sin = sin.float() * torch.cos(extra) + cos.float() * torch.sin(extra)
        return turned_cos.to(cos.dtype), turned_sin.to(sin.dtype)

    return [module.register_forward_hook(post, with_kwargs=True).remove for module in modules]


def flip_close_rows(logits: torch.Tensor, gap: float) -> torch.Tensor:
    """Where a row's top-2 gap is at most `gap` x its largest |logit|, raise the runner-up by twice the
    gap: one logit moves, the argmax flips."""
    top = logits.topk(2, dim=-1)
    first, second = top.values[..., :1], top.values[..., 1:]
    scale = logits.abs().amax(dim=-1, keepdim=True)
    close = (first - second) <= gap * scale
    raised = torch.where(close, 2 * first - second, second)
    return logits.scatter(-1, top.indices[..., 1:], raised)


def _batch_mean_leak(session: DecodeSession, weight: float) -> Undo:
    """Every row gets `weight` x the batch mean after the first layer: a bug of the step itself, which
    eager runs over the real rows only."""
    module, _ = _layer(session, 0)

    def post(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        mixed = hidden + weight * hidden.mean(dim=0, keepdim=True)
        return (mixed, *output[1:]) if isinstance(output, tuple) else mixed

    return module.register_forward_hook(post).remove


def _wrong_bucket(graphs: DecodeGraphs) -> int:
    if len(graphs.buckets) < 2:
        raise ValueError("a wrong-bucket fault needs two batch buckets")
    largest, smaller = graphs.buckets[-1], graphs.buckets[-2]
    for context in graphs.contexts:
        graphs.graphs[largest, context] = graphs.graphs[smaller, context]
    return len(graphs.contexts)


def _wrong_context(graphs: DecodeGraphs) -> int:
    if len(graphs.contexts) < 2:
        raise ValueError("a wrong-context fault needs two context buckets")
    for bucket in graphs.buckets:
        graphs.graphs[bucket, graphs.contexts[-1]] = graphs.graphs[bucket, graphs.contexts[0]]
    return len(graphs.buckets)


def _top_logit_of_row_0(session: DecodeSession, value: float) -> list[Undo]:
    def change(logits: torch.Tensor) -> torch.Tensor:
        flat = logits.reshape(logits.shape[0], -1)
        top = torch.zeros_like(flat, dtype=torch.bool).scatter(-1, flat.argmax(-1, keepdim=True), True)
        top[1:] = False
        return torch.where(top, torch.full_like(flat, value), flat).reshape(logits.shape)

    return _logits_hook(session, change)


def _changed_write(session: DecodeSession, planted: Fault, change: Callable[[int, torch.Tensor], torch.Tensor]):
    """`change(n, written)` applied to what one layer wrote into its K (n=0) and V (n=1) cache, with tensor
    ops on the device's write position, so the graph records them."""
    module, index = _layer(session, planted.layer)
    cache = session.kv.layers[index]
    saved: dict[str, torch.Tensor] = {}

    def pre(module, args):
        saved["slot"] = cache.cumulative_length.reshape(1).clone()

    def post(module, args, output):
        slot = saved["slot"]
        for n, tensor in enumerate((cache.keys, cache.values)):
            tensor.index_copy_(2, slot, change(n, tensor.index_select(2, slot)).to(tensor.dtype))

    return [module.register_forward_pre_hook(pre).remove, module.register_forward_hook(post).remove]


def _nan_cache(session: DecodeSession, planted: Fault) -> list[Undo]:
    def change(n: int, written: torch.Tensor) -> torch.Tensor:
        if n:
            return written
        # the first element by its index: an item assignment copies a host scalar, which a capture refuses
        index = torch.arange(written.numel(), device=written.device).reshape(written.shape)
        return written.masked_fill(index == 0, float("nan"))

    return _changed_write(session, planted, change)


def _cache_noise(session: DecodeSession, planted: Fault) -> list[Undo]:
    """Fixed noise (the same values at every replay) of `size` x each row's rms added to the written K/V."""
    cache = session.kv.layers[_layer(session, planted.layer)[1]]
    noise = [_hashed_normal(t[:, :, :1].shape, t.device, n) for n, t in enumerate((cache.keys, cache.values))]

    def change(n: int, written: torch.Tensor) -> torch.Tensor:
        written = written.float()
        rms = written.pow(2).mean((1, 2, 3), keepdim=True).sqrt()
        return written + planted.size * rms * noise[n][: written.shape[0]]

    return _changed_write(session, planted, change)


def cache_noise_fault(session: DecodeSession, times: float, layer: int = -1, prompt_len: int = 6) -> Fault:
    """A cache_noise fault whose noise is `times` x eager's own relative error in that layer's written K/V
    against the float32 reference (the median over rows of one step from a random prompt): a replay cache
    about sqrt(1 + times**2) x further from float32 than eager's."""
    from accelerate_graph.core.decode_session import draw_inputs
    from accelerate_graph.verify.against_eager import written
    from accelerate_graph.verify.criterion import cache_errors
    from accelerate_graph.verify.reference import eager_step, float32_reference, reference_step

    index = _layer(session, layer)[1]
    rows = session.max_batch
    prompt, tokens = draw_inputs(rows, 1, prompt_len, session.vocab_size, 7)
    positions = torch.full((rows,), prompt_len, device=session.device)
    runs = []
    for reference in (False, True):
        session.kv.reset()
        session.prefill(prompt)
        with float32_reference(session) if reference else contextlib.nullcontext():
            (reference_step if reference else eager_step)(session, tokens[0].to(session.device), positions)
        runs.append(written(session, rows, prompt_len, 1)[index : index + 1])
    session.kv.reset()
    eager_error = cache_errors(*runs).median().item()
    return Fault("cache_noise", times * eager_error, layer)


# per session: the wrong scales a wrong_scale fault's graphs read (a CUDA graph keeps their addresses)
_WRONG_SCALES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _wrong_scale(session: DecodeSession, planted: Fault) -> list[Undo]:
    """The last FP8 layer of one decoder layer (a Llama MLP's down projection: straight into the residual)
    runs with its output channel 0's scale x (1 + size), under block scales its first row of blocks': the
    replay reads a wrong scale tensor where eager reads the right one. Swapped around the decoder layer's
    call: the fused layer program reads the projection's scale without calling the projection."""
    module, _ = _layer(session, planted.layer)
    layers = fp8_layers(module)
    if not layers:
        raise ValueError("a wrong-scale fault needs FP8 layers (weights fp8 or fp8-block)")
    target = layers[-1]
    wrong = target.scale.detach().clone()
    wrong[0] *= 1 + planted.size
    wrong = torch.nn.Parameter(wrong, requires_grad=False)
    _WRONG_SCALES.setdefault(session, []).append(wrong)
    right: list[torch.nn.Parameter] = []

    def pre(layer, args):
        right.append(target.scale)
        target.scale = wrong

    def post(layer, args, output):
        target.scale = right.pop()

    return [module.register_forward_pre_hook(pre).remove, module.register_forward_hook(post, always_call=True).remove]


_RECORDING_FAULTS: dict[str, Callable[[DecodeSession, Fault], list[Undo]]] = {
    "frozen_position": _frozen_position,
    "skipped_write": lambda session, planted: _moved_write(session, planted, None),
    "wrong_slot": lambda session, planted: _moved_write(session, planted, 1),
    "skipped_layer": _skipped_layer,
    "drift": _drift,
    "close_flip": _close_flip,
    "rotary_skew": _rotary_skew,
    "nan_top_logit": lambda session, planted: _top_logit_of_row_0(session, float("nan")),
    "inf_top_logit": lambda session, planted: _top_logit_of_row_0(session, float("inf")),
    "nan_cache": _nan_cache,
    "cache_noise": _cache_noise,
    "wrong_scale": _wrong_scale,
}
_DISPATCH_FAULTS: dict[str, Callable[[DecodeGraphs], int]] = {  # -> how many graphs each changed
    "wrong_bucket": _wrong_bucket,
    "wrong_context": _wrong_context,
}


def _decode_pre_hook(session: DecodeSession, change: Callable[[dict], None]) -> list[Undo]:
    """A pre-hook on the model's forward that changes the keyword arguments of a decode step (one token
    per row; a prefill passes unchanged)."""

    def pre(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[-1] == 1:
            change(kwargs)
        return args, kwargs

    return [session.model.register_forward_pre_hook(pre, with_kwargs=True).remove]


def _ignored_mask(session: DecodeSession, planted: Fault) -> list[Undo]:
    def change(kwargs):
        kwargs["attention_mask"] = torch.ones_like(kwargs["attention_mask"])

    return _decode_pre_hook(session, change)


def _shared_position(session: DecodeSession, planted: Fault) -> list[Undo]:
    def change(kwargs):
        positions = kwargs["position_ids"]
        kwargs["position_ids"] = positions[:1].expand_as(positions).clone()

    return _decode_pre_hook(session, change)


def _scaled_when(session: DecodeSession, flag: Callable[[dict], torch.Tensor]) -> list[Undo]:
    """Every logit x1.5 in a step where `flag(kwargs)` (a device bool, recorded at the step's start) holds."""
    saved: dict[str, torch.Tensor] = {}

    def change(kwargs):
        saved["on"] = flag(kwargs)

    def scale(logits):
        return torch.where(saved["on"], logits * 1.5, logits) if "on" in saved else logits

    return _decode_pre_hook(session, change) + _logits_hook(session, scale)


def _late_slot(session: DecodeSession, planted: Fault) -> list[Undo]:
    """Wrong only where the step writes slot `size` or later: read from the device write position."""
    return _scaled_when(session, lambda kwargs: session.kv.positions()[0].reshape(()) >= int(planted.size))


# per session: a run counter on the device per captured graph, keyed by (rows, attended slots)
_RUN_COUNTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _late_replay(session: DecodeSession, planted: Fault) -> list[Undo]:
    """Wrong only from a graph's `size`-th run of the step on: each graph increments its own counter on
    the device (the capture's warm-up and recording runs count too)."""
    counters = _RUN_COUNTERS.setdefault(session, {})

    def flag(kwargs):
        key = (kwargs["input_ids"].shape[0], kwargs["attention_mask"].shape[-1])
        if key not in counters:
            counters[key] = torch.zeros((), dtype=torch.long, device=session.device)
        counter = counters[key]
        counter.add_(1)
        return counter >= int(planted.size)

    return _scaled_when(session, flag)


def _rounding_noise(session: DecodeSession, planted: Fault) -> list[Undo]:
    """Every nn.Linear (the projections and the LM head; FP8 layers are not nn.Linear) computed as another
    correct kernel would: accumulated wider than its dtype over 4 K-chunks summed last to first, times
    1 +- eps/16 (a fixed sign per output element), rounded once. Each element stays within 5/8 ulp of the
    exact product, as a float32-accumulating kernel's does, yet differs from eager's in a fair share of them."""
    modules = [module for module in session.model.modules() if isinstance(module, torch.nn.Linear)]
    if not modules:
        raise ValueError("a rounding-noise fault needs a model with nn.Linear layers")

    def post(module, args, output):
        wide = torch.float64 if output.dtype == torch.float32 else torch.float32
        x, weight = args[0].to(wide), module.weight.to(wide)
        chunks = zip(x.tensor_split(4, dim=-1), weight.tensor_split(4, dim=-1))
        partials = [part @ rows.T for part, rows in chunks]
        exact = sum(reversed(partials[:-1]), partials[-1])
        if module.bias is not None:
            exact = exact + module.bias.to(wide)
        sign = _hashed_signs(exact.shape, exact.device).to(wide)
        return (exact * (1 + sign * (torch.finfo(output.dtype).eps / 16))).to(output.dtype)

    return [module.register_forward_hook(post).remove for module in modules]


def _hashed(index: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each index (int64 arithmetic): values fixed by position, drawn on the device by
    tensor operations alone, so a graph capture records them (a host draw copied in would be refused)."""
    h = index * 2654435761 & 0xFFFFFFFF
    h = (h ^ (h >> 16)) * 0x45D9F3B & 0xFFFFFFFF
    return h ^ (h >> 16)


def _hashed_signs(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """+1 or -1 per element from a hash of its index: fixed, and unrelated to the layout."""
    return 1 - 2 * (_hashed(torch.arange(shape.numel(), device=device).reshape(shape)) & 1)


def _hashed_normal(shape: torch.Size, device: torch.device, stream: int = 0) -> torch.Tensor:
    """Standard normal float32 values per element (Box-Muller over two hashed uniforms in (0, 1)); each
    `stream` draws other values."""
    index = torch.arange(shape.numel(), device=device).reshape(shape) + 2 * stream * shape.numel()
    u1, u2 = ((_hashed(index + offset) + 0.5) / 2**32 for offset in (0, shape.numel()))
    return torch.sqrt(-2 * torch.log(u1.float())) * torch.cos(2 * math.pi * u2.float())


def _padding_rows_only(session: DecodeSession, planted: Fault) -> Undo:
    """The bucket's padding rows (those past the batch `load_inputs` was given) garbled after the first
    layer, in the graph and in eager alike: eager has no padding rows, and a real row never reads them."""
    real = torch.zeros((), dtype=torch.long, device=session.device)
    plain = session.load_inputs

    def load_inputs(bucket, tokens, positions):
        real.fill_(tokens.shape[0])
        plain(bucket, tokens, positions)

    def post(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        if hidden.shape[1] != 1:  # a prefill: every row is real
            return output
        rows = torch.arange(hidden.shape[0], device=hidden.device).reshape(-1, 1, 1)
        garbled = torch.where(rows >= real, hidden * 1000.0 + 7.0, hidden)
        return (garbled, *output[1:]) if isinstance(output, tuple) else garbled

    session.load_inputs = load_inputs
    handle = _layer(session, 0)[0].register_forward_hook(post)

    def undo() -> None:
        handle.remove()
        del session.load_inputs  # the class's method again

    return undo


_RECORDING_FAULTS.update(
    {
        "ignored_mask": _ignored_mask,
        "shared_position": _shared_position,
        "late_slot": _late_slot,
        "late_replay": _late_replay,
        "rounding_noise": _rounding_noise,
    }
)
_LASTING_FAULTS: dict[str, Callable[[DecodeSession, Fault], Undo]] = {
    "padded_leak": lambda session, planted: _batch_mean_leak(session, planted.size),
    "padding_rows_only": _padding_rows_only,
}
